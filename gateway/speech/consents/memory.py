"""Consents in this process's memory: :class:`MemoryConsentStore`."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from gateway.speech.consents.base import ConsentRecord, page_of

if TYPE_CHECKING:
    from storage import Page

__all__ = ["MemoryConsentStore"]


class MemoryConsentStore:
    """Consents of one process (the embedded default); bounded by the tenants and their cap."""

    def __init__(self) -> None:
        self._records: dict[str, dict[str, tuple[ConsentRecord, bytes]]] = {}

    async def add(self, consent: ConsentRecord, recording: bytes, *, max_per_tenant: int) -> bool:
        records = self._records.setdefault(consent.tenant, {})
        if len(records) >= max_per_tenant:
            return False
        records[consent.id] = (consent, recording)
        return True

    async def get(self, tenant: str, consent_id: str) -> ConsentRecord | None:
        entry = self._records.get(tenant, {}).get(consent_id)
        return entry[0] if entry else None

    async def recording(self, tenant: str, consent_id: str) -> bytes | None:
        entry = self._records.get(tenant, {}).get(consent_id)
        return entry[1] if entry else None

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[ConsentRecord]:
        return page_of([record for record, _ in self._records.get(tenant, {}).values()], after, limit)

    async def rename(self, tenant: str, consent_id: str, name: str) -> ConsentRecord | None:
        records = self._records.get(tenant, {})
        if consent_id not in records:
            return None
        record, recording = records[consent_id]
        records[consent_id] = (renamed := replace(record, name=name), recording)
        return renamed

    async def delete(self, tenant: str, consent_id: str) -> bool:
        return self._records.get(tenant, {}).pop(consent_id, None) is not None

    async def forget_tenant(self, tenant: str) -> None:
        self._records.pop(tenant, None)
