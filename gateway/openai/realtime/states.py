"""The small immutable states that OpenAI Realtime's server events describe: a session's settings, its items, a
response, a rate limit."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, TypeAlias

from gateway.audio import G711_SAMPLE_RATE, AudioFormat, output_sample_rate
from gateway.schemas import CustomVoice, SpeechRequest

if TYPE_CHECKING:
    from collections.abc import Mapping

    from gateway.audio import G711Law
    from gateway.http.errors import OpenAIError
    from gateway.schemas import SpeechUsage

__all__ = [
    "ContentPart",
    "Item",
    "ItemReference",
    "ItemStatus",
    "OutputAudioFormat",
    "PartType",
    "RateLimit",
    "ResponseParams",
    "ResponseState",
    "ResponseStatus",
    "Role",
    "SessionPatch",
    "SessionSettings",
    "Voice",
    "new_id",
]


Voice: TypeAlias = str | CustomVoice
"""A built-in voice's name, or ``{"id": "voice_..."}`` for a custom voice."""
Role: TypeAlias = Literal["user", "assistant", "system"]
ItemStatus: TypeAlias = Literal["completed", "incomplete", "in_progress"]
ResponseStatus: TypeAlias = Literal["in_progress", "completed", "cancelled", "failed", "incomplete"]
PartType: TypeAlias = Literal["input_text", "output_text", "output_audio"]

#: The deepest nesting a client event may have; a valid one needs six levels (``response.input[].content[]``) plus


def new_id(prefix: str) -> str:
    """A random id the way OpenAI's look: ``sess_``, ``conv_``, ``item_``, ``resp_`` or ``event_`` and 20 hex digits."""
    return f"{prefix}_{secrets.token_hex(10)}"


# --- The states that server events describe ---------------------------------------------------------------------


class OutputAudioFormat(StrEnum):
    """An output format of OpenAI's Realtime API, by its ``type``."""

    PCM = "audio/pcm"
    """16-bit little-endian mono at 24 kHz."""
    PCMU = "audio/pcmu"
    """G.711 μ-law at 8 kHz."""
    PCMA = "audio/pcma"
    """G.711 A-law at 8 kHz."""

    @property
    def sample_rate(self) -> int:
        return output_sample_rate(AudioFormat.PCM) if self is OutputAudioFormat.PCM else G711_SAMPLE_RATE

    @property
    def g711_law(self) -> G711Law | None:
        """The law for :func:`gateway.audio.open_g711_encoder`; ``None`` for PCM."""
        return None if self is OutputAudioFormat.PCM else "pcmu" if self is OutputAudioFormat.PCMU else "pcma"

    def wire(self) -> dict[str, Any]:
        """OpenAI's object for the format; only PCM names a rate."""
        if self is OutputAudioFormat.PCM:
            return {"type": self.value, "rate": self.sample_rate}
        return {"type": self.value}


@dataclass(frozen=True, slots=True)
class SessionPatch:
    """The voice settings a ``session.update`` names; ``None`` leaves a setting as it is."""

    model: str | None = None
    voice: Voice | None = None
    output_format: OutputAudioFormat | None = None
    speed: float | None = None
    instructions: str | None = None
    """``""`` clears the instructions, as OpenAI documents."""
    seed: int | None = None
    """This gateway's extension: the seed every later response samples with."""
    seed_cleared: bool = False
    """``"seed": null`` in the update: later responses sample without one (``None`` elsewhere leaves a setting)."""


_PATCHED = ("model", "voice", "output_format", "speed", "instructions", "seed")


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """How a session speaks: what ``session.created`` and ``session.updated`` show."""

    model: str
    """The ``model`` of the connection's URL, unless an update changed it."""
    voice: Voice = "alloy"  # OpenAI's default
    output_format: OutputAudioFormat = OutputAudioFormat.PCM
    speed: float = 1.0
    instructions: str = ""
    seed: int | None = None
    """This gateway's extension (``session.seed``); shown in the session object only once set."""

    def apply(self, patch: SessionPatch) -> SessionSettings:
        """These settings with the ones ``patch`` names replaced."""
        named = {name: value for name in _PATCHED if (value := getattr(patch, name)) is not None}
        if patch.seed_cleared:
            named["seed"] = None
        return replace(self, **named)

    def changes(self, patch: SessionPatch) -> frozenset[str]:
        """The settings ``patch`` would change: OpenAI locks the voice once audio went out, the speed mid-response."""
        updated = self.apply(patch)
        return frozenset(name for name in _PATCHED if getattr(updated, name) != getattr(self, name))

    def for_response(self, params: ResponseParams) -> SessionSettings:
        """The settings one response speaks with: its own voice, format and instructions override the session's."""
        return self.apply(
            SessionPatch(voice=params.voice, output_format=params.output_format, instructions=params.instructions)
        )

    def speech_request(self, text: str) -> SpeechRequest:
        """The speech request for ``text``, as 24 kHz PCM: G.711 is encoded from it (``open_g711_encoder``)."""
        return SpeechRequest.pcm_segment(text, self, self.instructions or None)  # "": none, as OpenAI says


@dataclass(frozen=True, slots=True)
class ContentPart:
    """One part of a message: text, or the transcript of the audio a response spoke."""

    type: PartType
    text: str
    """The text; for ``output_audio``, the transcript."""

    def wire(self) -> dict[str, Any]:
        # OpenAI leaves the audio itself out of item events; it is only in the response's deltas.
        return {"type": self.type, "transcript" if self.type == "output_audio" else "text": self.text}


@dataclass(frozen=True, slots=True)
class Item:
    """A message of the conversation."""

    id: str
    role: Role
    content: tuple[ContentPart, ...] = ()
    status: ItemStatus = "completed"

    @property
    def text(self) -> str:
        """What the message says: its parts, one per line."""
        return "\n".join(part.text for part in self.content)

    def wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "realtime.item",
            "type": "message",
            "status": self.status,
            "role": self.role,
            "content": [part.wire() for part in self.content],
        }


@dataclass(frozen=True, slots=True)
class ItemReference:
    """An item of the conversation named in a response's ``input`` by its id; the session looks it up."""

    id: str


@dataclass(frozen=True, slots=True)
class ResponseParams:
    """What a ``response.create`` asks for; ``None`` takes the session's setting."""

    conversation: Literal["auto", "none"] = "auto"
    """``none``: an out-of-band response, whose item joins no conversation."""
    input: tuple[Item | ItemReference, ...] | None = None
    """What to speak instead of the conversation (``()``: nothing); ``None``: the conversation."""
    instructions: str | None = None
    voice: Voice | None = None
    output_format: OutputAudioFormat | None = None
    metadata: Mapping[str, str] | None = None


_ITEM_STATUS: Final[Mapping[ResponseStatus, ItemStatus]] = MappingProxyType(
    {
        "in_progress": "in_progress",
        "completed": "completed",
        "cancelled": "incomplete",
        "failed": "incomplete",
        "incomplete": "incomplete",
    }
)


@dataclass(frozen=True, slots=True)
class ResponseState:
    """One response: a single assistant message with a single audio part, as a speaker's responses all are."""

    id: str
    item_id: str
    conversation_id: str | None
    """The conversation the item joins; ``None`` for ``conversation: none``."""
    voice: Voice
    output_format: OutputAudioFormat
    metadata: Mapping[str, str] | None = None
    transcript: str = ""
    status: ResponseStatus = "in_progress"
    usage: SpeechUsage | None = None
    error: OpenAIError | None = None
    """Why a ``failed`` response failed."""

    @classmethod
    def start(cls, settings: SessionSettings, params: ResponseParams, *, conversation_id: str) -> ResponseState:
        """A new response in progress, speaking with ``settings`` overridden by ``params``.

        Args:
            settings: The session's settings.
            params: The ``response.create``'s.
            conversation_id: The session's conversation; the response has none if ``params`` say ``none``.
        """
        spoken = settings.for_response(params)
        return cls(
            id=new_id("resp"),
            item_id=new_id("item"),
            conversation_id=conversation_id if params.conversation == "auto" else None,
            voice=spoken.voice,
            output_format=spoken.output_format,
            metadata=params.metadata,
        )

    @property
    def conversation(self) -> Literal["auto", "none"]:
        return "auto" if self.conversation_id is not None else "none"

    @property
    def item(self) -> Item:
        """The response's message; like OpenAI's, it has no content until its transcript begins or it ends."""
        started = bool(self.transcript) or self.status != "in_progress"
        content = (ContentPart("output_audio", self.transcript),) if started else ()
        return Item(self.item_id, "assistant", content, _ITEM_STATUS[self.status])

    def add_transcript(self, delta: str) -> ResponseState:
        return replace(self, transcript=self.transcript + delta)

    def finish(
        self,
        status: Literal["completed", "cancelled", "failed", "incomplete"],
        *,
        usage: SpeechUsage | None = None,
        error: OpenAIError | None = None,
    ) -> ResponseState:
        """The response ended: ``cancelled`` is reported as the client's doing, ``failed`` with ``error``."""
        return replace(self, status=status, usage=usage, error=error)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """One entry of ``rate_limits.updated``."""

    name: Literal["requests", "tokens"]
    limit: int
    remaining: int
    reset_seconds: float
