"""What the audio cache keeps of a complete reply: the key of a plan, and the binary record stored under it.

A record: its format (1), the audio seconds, flags (bit 0: the words were placed exactly), the words
(``alignment.pack_words``), then the encoded audio. Format 0 (the audio seconds, then the audio) lived under cache keys
of version 1: it is never read, so an older replica sharing the Redis never plays this header as audio either.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engines.timing import word_spans
from gateway.audio import output_sample_rate
from gateway.speech.alignment import SpeechChunk, WordTime, pack_words, unpack_words
from gateway.speech.cache import cache_key

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, Iterable, Sequence

    from auth import Tenant
    from engines.timing import TimestampsKind
    from gateway.speech.plan import SpeechPlan

__all__ = ["CachedAudio", "fitted_words", "hit_chunks", "pack_record", "plan_key", "tenant_scope", "unpack_record"]

_HEADER = struct.Struct("<BdB")
_FORMAT = 1
_EXACT = 1
_HIT_CHUNK_BYTES = 32 * 1024


@dataclass(frozen=True, slots=True)
class CachedAudio:
    """A record read back: the audio's seconds, how its words were placed, the words and the encoded audio."""

    seconds: float
    timestamps: TimestampsKind
    words: list[WordTime]
    audio: memoryview


def pack_record(seconds: float, timestamps: TimestampsKind, words: Sequence[WordTime], audio: Iterable[bytes]) -> bytes:
    """The record of a complete reply: ``audio``'s pieces joined behind its header and its words."""
    flags = _EXACT if timestamps == "exact" else 0
    return _HEADER.pack(_FORMAT, seconds, flags) + pack_words(words) + b"".join(audio)


def unpack_record(cached: bytes) -> CachedAudio | None:
    """The record :func:`pack_record` wrote; ``None`` when it cannot be read or is of another format."""
    try:
        version, seconds, flags = _HEADER.unpack_from(cached)
        if version != _FORMAT:
            return None
        words, size = unpack_words(memoryview(cached)[_HEADER.size :])
    except struct.error:
        return None
    timestamps: TimestampsKind = "exact" if flags & _EXACT else "estimated"
    return CachedAudio(seconds, timestamps, words, memoryview(cached)[_HEADER.size + size :])


def tenant_scope(tenant: Tenant) -> str:
    """What keeps a tenant's audio apart from another's in the cache (where tenants do not share it)."""
    # The generation changes when a tenant is deleted and created again: the new tenant never hits the old one's
    # audio (the cache cannot be enumerated to delete it). Tenants stored before generations keep their old scope.
    return f"{tenant.name}#{tenant.generation}" if tenant.generation else tenant.name


def plan_key(plan: SpeechPlan, tenant_scope: str) -> str:
    """The cache key of what ``plan`` will say, in ``tenant_scope`` (empty where tenants share the cache)."""
    request, info = plan.request, plan.info
    details = info.details if info is not None else {}
    params: dict[str, object] = {k: v for k, v in details.items() if k != "weights"}
    params["tenant_scope"] = tenant_scope  # empty when tenants share the cache
    if plan.voices:  # what the script's other voices sound like
        params["voices"] = {name: voice.identity for name, voice in sorted(plan.voices.items())}
    if request.control_tokens:  # "[laugh]" read as a laugh, not as the word
        params["control_tokens"] = True
    if plan.pronunciation:  # a new version of a dictionary is new audio (absent otherwise: keys stay as they were)
        params["pronunciation"] = [list(version) for version in plan.pronunciation]
    if request.seed is not None:  # another seed is other audio; unseeded requests keep their keys
        params["seed"] = request.seed
    if request.language_code is not None:  # another language is other audio; absent, keys stay as they were
        params["language"] = request.language_code.lower().replace("_", "-")
    if not request.normalize_text:  # "3" read as written, not as "three"
        params["normalize_text"] = False
    rate = output_sample_rate(request.response_format, request.sample_rate)
    if rate != output_sample_rate(request.response_format):  # the format's own rate, asked for or not, is one entry
        params["sample_rate"] = rate
    return cache_key(
        engine=plan.pool.name,
        weights_id=details.get("weights", ""),
        text=plan.script.cache_text() if plan.script is not None else request.input,
        voice_id=plan.voice.identity,
        response_format=request.response_format,
        speed=request.speed,
        instructions=request.instructions,
        params=params,
    )


async def hit_chunks(
    audio: memoryview, words: tuple[WordTime, ...], seconds: float
) -> AsyncGenerator[SpeechChunk, None]:
    """A cached reply of ``seconds`` in pieces, every word with the first: the client has all of the audio at once
    anyway (each piece's seconds: its share of the bytes)."""
    for start in range(0, len(audio), _HIT_CHUNK_BYTES):
        end = min(start + _HIT_CHUNK_BYTES, len(audio))
        yield SpeechChunk(bytes(audio[start:end]), words if start == 0 else (), seconds * end / len(audio))
    if not audio and words:
        yield SpeechChunk(b"", words, seconds)


def fitted_words(text: str, stored: list[WordTime]) -> list[WordTime] | None:
    """The stored words on ``text``'s characters: as stored when ``text`` has the same words in the same places, moved
    onto its words when it has as many (the key's text was normalised: whitespace, NFC), else ``None``."""
    spans = word_spans(text)
    if [(w.char_start, w.char_end) for w in stored] == spans:
        return stored
    if len(spans) != len(stored):
        return None
    return [WordTime(start, end, w.start_s, w.end_s) for (start, end), w in zip(spans, stored, strict=True)]
