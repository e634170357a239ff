"""Tenant-scoped consent recordings (``/v1/audio/voice_consents``): a label, a language, and the recording itself,
kept for audit as Ogg/Opus (``gateway/audio/samples.py``), never as uploaded.

A tenant only ever sees its own consents: another tenant's id answers "not found", as for voices. Ids sort by
creation time (``cons_`` + 12 hex digits of milliseconds + 12 random ones), so a list page starts right after its
``after`` cursor even when that consent was deleted meanwhile.

What a store holds is bounded: ``max_per_tenant`` consents per tenant, each at most
:data:`~gateway.audio.samples.MAX_RECORDING_S` of 16 kbit/s Opus (about 60 KB).
"""

from __future__ import annotations

from gateway.speech.consents.base import ConsentRecord, ConsentStore, new_consent
from gateway.speech.consents.memory import MemoryConsentStore
from gateway.speech.consents.redis import RedisConsentStore

__all__ = ["ConsentRecord", "ConsentStore", "MemoryConsentStore", "RedisConsentStore", "new_consent"]
