"""The consent store's contract and its records."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Protocol

from storage import Page

__all__ = ["ConsentRecord", "ConsentStore", "new_consent", "page_of"]


@dataclass(frozen=True, slots=True)
class ConsentRecord:
    """What the API shows of a consent (its recording is kept apart: listings never load audio)."""

    id: str
    tenant: str
    name: str
    language: str
    created_at: float
    duration_s: float
    """How long the recording lasts (its audit copy is stored beside the record)."""

    def public(self) -> dict[str, object]:
        """OpenAI's ``audio.voice_consent``."""
        return {
            "object": "audio.voice_consent",
            "id": self.id,
            "name": self.name,
            "language": self.language,
            "created_at": int(self.created_at),
        }


def new_consent(tenant: str, name: str, language: str, duration_s: float) -> ConsentRecord:
    now = time.time()
    consent_id = f"cons_{int(now * 1000):012x}{secrets.token_hex(6)}"
    return ConsentRecord(consent_id, tenant, name, language, now, round(duration_s, 3))


class ConsentStore(Protocol):
    async def add(self, consent: ConsentRecord, recording: bytes, *, max_per_tenant: int) -> bool:
        """Store ``consent`` and its audit recording unless its tenant has ``max_per_tenant`` already (``False``)."""
        ...

    async def get(self, tenant: str, consent_id: str) -> ConsentRecord | None: ...

    async def recording(self, tenant: str, consent_id: str) -> bytes | None:
        """The audit copy of the recording (Ogg/Opus)."""
        ...

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[ConsentRecord]:
        """Up to ``limit`` consents whose id sorts after ``after`` (from the first when ``None``)."""
        ...

    async def rename(self, tenant: str, consent_id: str, name: str) -> ConsentRecord | None:
        """The consent under its new label, or ``None`` when the tenant has no such consent."""
        ...

    async def delete(self, tenant: str, consent_id: str) -> bool: ...

    async def forget_tenant(self, tenant: str) -> None:
        """Delete every consent of the tenant, recordings included (the tenant was deleted)."""
        ...


def page_of(records: list[ConsentRecord], after: str | None, limit: int) -> Page[ConsentRecord]:
    ordered = sorted((r for r in records if after is None or r.id > after), key=lambda r: r.id)
    return Page.of(ordered, limit)
