"""Dictionaries in this process's memory: :class:`MemoryDictionaryStore`, for a single replica and for tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from storage import Page

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gateway.speech.dictionaries.base import DictionaryRecord
    from gateway.text.lexicon import Rule


__all__ = ["MemoryDictionaryStore"]

_UPDATE_TRIES = 5


class MemoryDictionaryStore:
    """Dictionaries of one process (the embedded default)."""

    def __init__(self) -> None:
        self._records: dict[str, dict[str, DictionaryRecord]] = {}
        self._rules: dict[tuple[str, str, str], tuple[Rule, ...]] = {}

    async def add(self, record: DictionaryRecord, *, max_per_tenant: int) -> bool:
        records = self._records.setdefault(record.tenant, {})
        if len(records) >= max_per_tenant:
            return False
        records[record.id] = record
        self._rules[record.tenant, record.id, record.version_id] = record.rules
        return True

    async def get(self, tenant: str, dictionary_id: str) -> DictionaryRecord | None:
        return self._records.get(tenant, {}).get(dictionary_id)

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[DictionaryRecord]:
        ids = sorted(i for i in self._records.get(tenant, {}) if after is None or i > after)
        return Page.of([self._records[tenant][i] for i in ids[: limit + 1]], limit)

    async def rules(self, tenant: str, dictionary_id: str, version_id: str) -> tuple[Rule, ...] | None:
        return self._rules.get((tenant, dictionary_id, version_id))

    async def versions(self, tenant: str, locators: Sequence[tuple[str, str | None]]) -> list[str | None]:
        return [self._version(tenant, dictionary_id, version_id) for dictionary_id, version_id in locators]

    def _version(self, tenant: str, dictionary_id: str, version_id: str | None) -> str | None:
        if version_id is not None:
            return version_id if (tenant, dictionary_id, version_id) in self._rules else None
        record = self._records.get(tenant, {}).get(dictionary_id)
        return None if record is None else record.version_id

    async def replace(self, updated: DictionaryRecord, *, made_from: str, dropped: Sequence[str]) -> bool | None:
        current = await self.get(updated.tenant, updated.id)
        if current is None:
            return None
        if current.version_id != made_from:
            return False
        self._records[updated.tenant][updated.id] = updated
        self._rules[updated.tenant, updated.id, updated.version_id] = updated.rules
        for version in dropped:
            self._rules.pop((updated.tenant, updated.id, version), None)
        return True

    async def forget_tenant(self, tenant: str) -> None:
        self._records.pop(tenant, None)
        for key in [key for key in self._rules if key[0] == tenant]:
            del self._rules[key]
