"""``GET /v1/voices``, ``GET /v2/voices`` and ``GET /v1/voices/{voice_id}``: the voices a caller may speak with, in
ElevenLabs' voice object.

The same voices as ``GET /v1/audio/voices`` (``gateway/routes/catalog.py``): the built-in voices of the engines of the
models the tenant may use (``premade``, the voice's name as its ``voice_id``) and the tenant's custom voices
(``cloned``, their ``voice_…`` id). A tenant has at most ``voices.max_per_tenant`` custom voices and the engines a
few dozen built-in ones, so a listing reads them whole and pages what it answers. ``GET /v2/voices`` filters by the
voices' labels (``gender``, ``age``, ``language``, ``accent``, ``use_cases``): a voice without the label asked for is
left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from litestar import Controller, Request, get
from litestar.params import Parameter

from gateway.elevenlabs.errors import error_responses
from gateway.elevenlabs.wire import ElevenLabsVoice, VoicePage, Voices
from gateway.http.auth.dependencies import Caller, Router, VoicesDep
from gateway.schemas import (
    CUSTOM_VOICE_PREFIX,
    BuiltInVoice,
)
from gateway.speech.errors import UnknownVoiceError
from gateway.speech.voice_aliases import PREMADE_VOICES, built_in_aliases
from gateway.speech.voices import CustomVoiceRecord  # noqa: TC001 - a parameter's type
from gateway.state import gateway_state

if TYPE_CHECKING:
    from collections.abc import Mapping

    from engines.base import EngineInfo

__all__ = ["LabelFilter", "VoicesController", "voice_of"]

MAX_PAGE_SIZE = 100
_CUSTOM_VOICE_TYPES = frozenset({"personal", "non-default", "non-community", "workspace", "saved"})


class VoicesController(Controller):
    """ElevenLabs' voices: its listing (``/v1/voices``), its search (``/v2/voices``) and one voice."""

    path = "/"

    @get(
        "/v1/voices",
        operation_id="elevenLabsListVoices",
        summary="ElevenLabs: every voice you may speak with, built in and your own.",
        responses=error_responses(401, 422, 429, 503),
    )
    async def list_voices(
        self,
        router: Router,
        voices: VoicesDep,
        principal: Caller,
        show_legacy: Annotated[bool | None, Parameter(description="Accepted and ignored.")] = None,
    ) -> Voices:
        return Voices(voices=await _all_voices(router, voices, principal))

    @get(
        "/v1/voices/{voice_id:str}",
        operation_id="elevenLabsGetVoice",
        summary="ElevenLabs: one voice.",
        responses=error_responses(401, 404, 422, 429, 503),
    )
    async def get_voice(  # noqa: PLR0917 - the route's parameters
        self,
        request: Request[Any, Any, Any],
        voice_id: Annotated[str, Parameter(min_length=1, max_length=256)],
        router: Router,
        voices: VoicesDep,
        principal: Caller,
        with_settings: Annotated[bool | None, Parameter(description="Accepted: settings are always there.")] = None,
    ) -> ElevenLabsVoice:
        return await voice_of(request, voice_id, router, voices, principal)

    @get(
        "/v2/voices",
        operation_id="elevenLabsSearchVoices",
        summary="ElevenLabs: a page of the voices you may speak with, searched, filtered and sorted.",
        responses=error_responses(401, 422, 429, 503),
    )
    async def search_voices(  # noqa: PLR0917 - ElevenLabs' parameters
        self,
        router: Router,
        voices: VoicesDep,
        principal: Caller,
        next_page_token: Annotated[
            str | None, Parameter(description="A page's `next_page_token`.", pattern=r"^\d{1,6}$")
        ] = None,
        page_size: Annotated[int, Parameter(description="Voices per page.", ge=1, le=MAX_PAGE_SIZE)] = 10,
        search: Annotated[
            str | None, Parameter(description="In the name, description, labels or category.", max_length=256)
        ] = None,
        sort: Annotated[str | None, Parameter(description="`name` or `created_at_unix`.", max_length=64)] = None,
        sort_direction: Annotated[str | None, Parameter(description="`asc` or `desc`.", max_length=16)] = None,
        voice_type: Annotated[
            str | None, Parameter(description="`default` (built in), `personal` (yours), ...", max_length=64)
        ] = None,
        category: Annotated[str | None, Parameter(description="`premade` or `cloned`.", max_length=64)] = None,
        voice_ids: Annotated[list[str] | None, Parameter(description="Only these voices.", max_items=100)] = None,
        include_total_count: Annotated[bool | None, Parameter(description="Accepted: it is always there.")] = None,
        gender: Annotated[
            str | None, Parameter(description="The `gender` label: `male`, `female`, `neutral`.", max_length=64)
        ] = None,
        age: Annotated[str | None, Parameter(description="The `age` label.", max_length=64)] = None,
        language: Annotated[
            str | None, Parameter(description="The `language` label (ISO 639-1).", max_length=64)
        ] = None,
        accent: Annotated[str | None, Parameter(description="The `accent` label.", max_length=64)] = None,
        use_cases: Annotated[
            list[str] | None, Parameter(description="Any of these `use_case` labels.", max_items=100)
        ] = None,
    ) -> VoicePage:
        labelled = {"gender": gender, "age": age, "language": language, "accent": accent}
        wanted = LabelFilter({name: value for name, value in labelled.items() if value}, use_cases)
        found = [
            voice
            for voice in await _all_voices(router, voices, principal)
            if _matches(voice, search=search, voice_type=voice_type, category=category, voice_ids=voice_ids)
            and wanted.admits(voice.labels)
        ]
        if sort in {"name", "created_at_unix"}:
            found.sort(key=lambda voice: (voice.name.lower(),) if sort == "name" else (voice.created_at_unix or 0,))
        if sort_direction == "desc":
            found.reverse()
        start = int(next_page_token or 0)
        end = start + page_size
        return VoicePage(
            voices=found[start:end],
            has_more=end < len(found),
            total_count=len(found),
            next_page_token=str(end) if end < len(found) else None,
        )


async def voice_of(
    request: Request[Any, Any, Any], voice_id: str, router: Router, voices: VoicesDep, principal: Caller
) -> ElevenLabsVoice:
    """The voice ``voice_id`` as the caller may speak with it: one of its custom voices, a built-in voice of a model
    it may use, or an alias of one.

    Raises:
        UnknownVoiceError: it has no such voice (ElevenLabs' 404 ``voice_not_found``).
    """
    if voice_id.startswith(CUSTOM_VOICE_PREFIX):
        custom = await voices.get(principal.tenant.name, voice_id)
        if custom is not None:
            return _custom(custom)
    else:
        found = _builtin_by_id(router, principal, voice_id)
        if found is not None:
            return found
        aliased = _aliased(request, principal, voice_id)
        if aliased is not None and (target := _builtin_by_id(router, principal, aliased)) is not None:
            # An alias (a premade id, say) is the voice it speaks, under the id the caller asked for.
            name = PREMADE_VOICES[voice_id].name if voice_id in PREMADE_VOICES else voice_id
            return target.model_copy(update={"voice_id": voice_id, "name": name})
    raise UnknownVoiceError(f"Voice '{voice_id}' was not found.", voice_id=voice_id, param="voice_id")


def _builtin_by_id(router: Router, principal: Caller, voice_id: str) -> ElevenLabsVoice | None:
    for voice in router.builtin_voices(router.model_names_for(principal.tenant)):
        if voice.id == voice_id:
            return _builtin(voice, router)
    return None


def _aliased(request: Request[Any, Any, Any], principal: Caller, voice_id: str) -> str | None:
    """The built-in voice ``voice_id`` is an alias of for this tenant (``gateway/speech/voice_aliases.py``)."""
    tenant_aliases = dict(principal.tenant.voice_aliases)
    return tenant_aliases.get(voice_id) or built_in_aliases(gateway_state(request.app).settings.voices.aliases).get(
        voice_id
    )


async def _all_voices(router: Router, voices: VoicesDep, principal: Caller) -> list[ElevenLabsVoice]:
    """The built-in voices of the models the tenant may use, then the tenant's custom voices of their engines."""
    models = router.model_names_for(principal.tenant)
    engines = {router.resolve(name).name for name in models}
    builtin = [_builtin(voice, router) for voice in router.builtin_voices(models)]
    custom = [_custom(voice) for voice in await voices.list(principal.tenant.name) if voice.model in engines]
    return [*builtin, *custom]


@dataclass(frozen=True, slots=True)
class LabelFilter:
    """``GET /v2/voices``' label filters: a voice passes when it has every label asked for with the value asked for
    (case aside), and a ``use_case`` label among ``use_cases``. A voice without a label asked for never passes: what is
    not known of a voice does not match."""

    labels: dict[str, str]
    use_cases: list[str] | None = None

    def admits(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(name, "").lower() != value.lower() for name, value in self.labels.items()):
            return False
        return not self.use_cases or labels.get("use_case", "").lower() in {case.lower() for case in self.use_cases}


def _builtin(voice: BuiltInVoice, router: Router) -> ElevenLabsVoice:
    backends = [router.resolve(model) for model in voice.models]
    engines = sorted({backend.name for backend in backends})
    return ElevenLabsVoice(
        voice_id=voice.id,
        name=voice.name,
        category="premade",
        labels={**_known_labels(voice.id, [backend.info for backend in backends]), "engines": ", ".join(engines)},
        description=voice.description or None,
        is_owner=False,
    )


def _known_labels(voice_id: str, infos: list[EngineInfo | None]) -> dict[str, str]:
    """The labels of ``voice_id`` that every engine speaking it gives alike (``VoiceInfo.labels``): a voice several
    engines speak may sound otherwise on each (ChatTTS samples its speakers), and a label one of them does not give
    is not known."""
    found: list[dict[str, str]] = []
    for info in infos:
        entry = next((v for v in info.voices if v.id == voice_id), None) if info is not None else None
        found.append(dict(entry.labels) if entry is not None else {})
    if not found:
        return {}
    first, *others = found
    return {name: value for name, value in first.items() if all(other.get(name) == value for other in others)}


def _custom(voice: CustomVoiceRecord) -> ElevenLabsVoice:
    return ElevenLabsVoice(
        voice_id=voice.id,
        name=voice.name,
        category="cloned",
        labels={"engines": voice.model},
        description=None,
        is_owner=True,
        created_at_unix=int(voice.created_at),
    )


def _matches(
    voice: ElevenLabsVoice,
    *,
    search: str | None,
    voice_type: str | None,
    category: str | None,
    voice_ids: list[str] | None,
) -> bool:
    """Whether ``voice`` passes ``GET /v2/voices``'s filters (``voice_type``: ``default`` is the built-in voices,
    the personal kinds the tenant's own; the voice library, ``community``, has none here)."""
    kinds = {"default": {"premade"}, "community": set()}.get(voice_type or "", {"premade", "cloned"})
    if voice_type in _CUSTOM_VOICE_TYPES:
        kinds = {"cloned"}
    words = " ".join([voice.name, voice.description or "", voice.category, *voice.labels.values()]).lower()
    return (
        voice.category in kinds
        and (not category or voice.category == category)
        and (not voice_ids or voice.voice_id in voice_ids)
        and (not search or search.lower() in words)
    )
