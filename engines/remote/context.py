"""What a front gateway tells an engine node with each request, beside OpenAI's ``POST /v1/audio/speech`` body.

The tenant context, in headers (short, ASCII):

- ``X-TTS-Tenant``: the name of the front's tenant the request is for (a stable identifier; never a key);
- ``X-TTS-Tenant-Weight``, ``X-TTS-Tenant-Priority``, ``X-TTS-Tenant-Max-Queued``: that tenant's
  :class:`~engines.scheduling.TenantShare` (absent: the default weight 1, ``normal``, no cap of its own).

The speaker of a custom voice, in the body field ``x_tts_speaker`` (up to 16384 characters of non-ASCII base16384
text: too large for a header under ``server.max_header_bytes``), and ``x_tts_continuing: true`` for a later segment
of a long input whose audio is already streaming (the node then neither refuses it for a full queue nor times it out,
as the front's own scheduler does not: ``EngineBackend.open_stream``). The speech request's own extensions
``control_tokens``, ``seed``, ``language_code`` and ``normalize_text`` go to an engine node as they are (another
OpenAI-compatible server is not sent them).

The front asks an engine node for its audio as server-sent events (``stream_format: "sse"``, ``response_format:
"pcm"``) and the node says in the ``X-TTS-Timestamps`` header of its answer how its engine placed the words (``exact``
or ``estimated``): the words' times then cross the hop with the audio (``engines/remote/node_events.py``), and the
front reports an espeak-ng node's marks as exact. A node of an older version answers without the header: the front then
places the words itself, from the audio.

An engine node also makes voices from samples for its fronts, on a route of its own (``POST /v1`` +
:data:`SAMPLE_ROUTE`, ``gateway/node/samples.py``): a JSON body ``{"model", "transcript", "sample_rate", "pcm"}``
(``pcm``: base64 of mono int16 little-endian samples) answered ``{"speaker": "..."}``. It keeps nothing; the front
stores the speaker and sends it back in ``x_tts_speaker`` with each request for that voice. When a tenant makes a voice
from a speaker string or a seed, the front asks a node whether its engine could speak with it
(:data:`SPEAKER_CHECK_ROUTE`: ``{"model", "speaker"}``, answered 204, or OpenAI's 400 naming ``speaker`` or ``model``);
a node of an older version answers 404, and the front then lets the speaker through (the node judges it when it
speaks).

An engine node answers with ``X-TTS-Engine-Node: 1``, the version of this extension it speaks; the front reads it
from the node's ``/readyz`` probe and sends the context and speakers only to endpoints that gave it, so that another
OpenAI-compatible server (OpenAI itself) never learns tenant names or speakers.

Both sides use this module: the front (``engines/remote/backend.py``) to encode, the node's gateway to decode, and
only after the caller presented the node's service token (``gateway/services.py``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engines.base import MAX_SPEAKER_CHARS, InvalidSynthesisRequestError
from engines.scheduling import DEFAULT_SHARE, PRIORITIES, TenantShare

if TYPE_CHECKING:
    from collections.abc import Mapping

    from engines.scheduling import Priority

__all__ = [
    "CONTINUING_FIELD",
    "CONTROL_TOKENS_FIELD",
    "ENGINE_NODE_HEADER",
    "LANGUAGE_FIELD",
    "MAX_QUEUED_HEADER",
    "MAX_SPEAKER_CHARS",
    "NORMALIZE_TEXT_FIELD",
    "PRIORITY_HEADER",
    "SAMPLE_ROUTE",
    "SEED_FIELD",
    "SPEAKER_CHECK_ROUTE",
    "SPEAKER_FIELD",
    "TENANT_HEADER",
    "TIMESTAMPS_HEADER",
    "WEIGHT_HEADER",
    "InvalidTenantContextError",
    "TenantContext",
    "context_headers",
    "engine_node_headers",
    "is_engine_node",
    "read_context",
    "tenant_context",
]

TENANT_HEADER = "x-tts-tenant"
WEIGHT_HEADER = "x-tts-tenant-weight"
PRIORITY_HEADER = "x-tts-tenant-priority"
MAX_QUEUED_HEADER = "x-tts-tenant-max-queued"
SAMPLE_ROUTE = "/engine/speaker_from_sample"
"""An engine node's route for voice samples, under its API base (``/v1``)."""
SPEAKER_CHECK_ROUTE = "/engine/check_speaker"
"""An engine node's route that checks a custom voice's speaker against its engine, under its API base (``/v1``)."""
ENGINE_NODE_HEADER = "x-tts-engine-node"
SPEAKER_FIELD = "x_tts_speaker"
CONTINUING_FIELD = "x_tts_continuing"
TIMESTAMPS_HEADER = "x-tts-timestamps"
"""An engine node's answer: how its engine placed the words of its ``speech.audio.timestamps`` events."""
CONTROL_TOKENS_FIELD = "control_tokens"
"""The speech request's own extension field (``SpeechRequest.control_tokens``), passed on to an engine node."""
SEED_FIELD = "seed"
"""The speech request's sampling seed (``SpeechRequest.seed``, an extension), passed on to an engine node only."""
LANGUAGE_FIELD = "language_code"
"""The speech request's language (``SpeechRequest.language_code``, an extension), passed on to an engine node only."""
NORMALIZE_TEXT_FIELD = "normalize_text"
"""``false`` when the text is read as written (``SpeechRequest.normalize_text``), passed on to an engine node only."""
_VERSION = "1"

# The pattern of tenant names in auth's settings (engines may not import auth): every tenant a front can serve.
_TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
_MAX_QUEUED_DIGITS = 9


class InvalidTenantContextError(InvalidSynthesisRequestError):
    """A tenant context header an engine node cannot read (a 400 naming the header in ``param``)."""


@dataclass(frozen=True, slots=True)
class TenantContext:
    """The front's tenant a request to an engine node is for, and its share of the node's engines."""

    tenant: str
    share: TenantShare = DEFAULT_SHARE


def tenant_context(tenant: str, share: TenantShare | None) -> TenantContext | None:
    """The context of a request made for ``tenant`` with ``share`` (``None``: the default); ``None`` for a request
    made for no tenant (``tenant`` empty), which the node counts as its own."""
    if not tenant:
        return None
    return TenantContext(tenant, DEFAULT_SHARE if share is None else share)


def context_headers(context: TenantContext) -> dict[str, str]:
    """The headers that carry ``context`` (the defaults of the share are sent too: explicit on the wire)."""
    share = context.share
    headers = {
        TENANT_HEADER: context.tenant,
        WEIGHT_HEADER: repr(share.weight),  # the shortest text that reads back as the same float
        PRIORITY_HEADER: share.priority,
    }
    if share.max_queued is not None:
        headers[MAX_QUEUED_HEADER] = str(share.max_queued)
    return headers


def read_context(headers: Mapping[str, str]) -> TenantContext | None:
    """The context in a request's headers (case-insensitive keys, as an ASGI framework gives them); ``None`` when
    it has none (a front of a version before this extension).

    Raises:
        InvalidTenantContextError: a header is malformed, or a share is sent without the tenant it belongs to.
    """
    tenant = headers.get(TENANT_HEADER)
    if tenant is None:
        for header in (WEIGHT_HEADER, PRIORITY_HEADER, MAX_QUEUED_HEADER):
            if headers.get(header) is not None:
                raise InvalidTenantContextError(f"Header {header} needs {TENANT_HEADER}.", param=header)
        return None
    share = TenantShare(
        weight=_weight(headers.get(WEIGHT_HEADER)),
        priority=_priority(headers.get(PRIORITY_HEADER)),
        max_queued=_max_queued(headers.get(MAX_QUEUED_HEADER)),
    )
    return TenantContext(_tenant(tenant), share)


def engine_node_headers() -> dict[str, str]:
    """What every answer of an engine node carries: the version of this extension it speaks."""
    return {ENGINE_NODE_HEADER: _VERSION}


def is_engine_node(headers: Mapping[str, str]) -> bool:
    """Whether an answer (the ``/readyz`` probe's) comes from an engine node that reads this extension."""
    return headers.get(ENGINE_NODE_HEADER, "").strip() == _VERSION


def _tenant(value: str) -> str:
    if not _TENANT_NAME.fullmatch(value):
        raise InvalidTenantContextError(
            f"Invalid {TENANT_HEADER} header: a tenant name is 1 to 63 of a-z, 0-9, '_', '.', '-'.",
            param=TENANT_HEADER,
        )
    return value


def _weight(value: str | None) -> float:
    if value is None:
        return DEFAULT_SHARE.weight
    try:
        weight = float(value)
    except ValueError:
        weight = math.nan
    if not (math.isfinite(weight) and weight > 0):
        raise InvalidTenantContextError(
            f"Invalid {WEIGHT_HEADER} header {value[:32]!r}: a finite number > 0.", param=WEIGHT_HEADER
        )
    return weight


def _priority(value: str | None) -> Priority:
    if value is None:
        return DEFAULT_SHARE.priority
    if value not in PRIORITIES:
        raise InvalidTenantContextError(
            f"Invalid {PRIORITY_HEADER} header {value[:32]!r}: one of {', '.join(PRIORITIES)}.", param=PRIORITY_HEADER
        )
    return value


def _max_queued(value: str | None) -> int | None:
    if value is None:
        return DEFAULT_SHARE.max_queued
    # Digits only: int() would also take "+4", " 4" and "4_000".
    if not (value.isascii() and value.isdigit() and len(value) <= _MAX_QUEUED_DIGITS and int(value) >= 1):
        raise InvalidTenantContextError(
            f"Invalid {MAX_QUEUED_HEADER} header {value[:32]!r}: an integer >= 1.", param=MAX_QUEUED_HEADER
        )
    return int(value)
