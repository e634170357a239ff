"""The dictionary store's contract (:class:`DictionaryStore`) and its records."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gateway.text.lexicon import Rule

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from storage import Page

__all__ = ["KEPT_VERSIONS", "DictionaryRecord", "DictionaryStore", "rules_from", "rules_json", "text_of"]

KEPT_VERSIONS = 10
"""Versions a dictionary keeps (its latest and the nine before it)."""


@dataclass(frozen=True, slots=True)
class DictionaryRecord:
    """A dictionary and its latest version's rules."""

    id: str
    tenant: str
    name: str
    description: str | None
    created_at: float
    version_id: str
    rules: tuple[Rule, ...]
    versions: tuple[str, ...]
    """The kept version ids, oldest first (the last is :attr:`version_id`)."""

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "rules": [asdict(rule) for rule in self.rules]})

    @classmethod
    def from_json(cls, raw: bytes | str) -> DictionaryRecord:
        fields: dict[str, Any] = json.loads(raw)
        fields["rules"] = rules_from(fields["rules"])
        fields["versions"] = tuple(fields["versions"])
        return cls(**fields)


def rules_from(raw: Sequence[dict[str, Any]]) -> tuple[Rule, ...]:
    return tuple(Rule(**rule) for rule in raw)


def text_of(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def rules_json(rules: Iterable[Rule]) -> str:
    return json.dumps([asdict(rule) for rule in rules])


class DictionaryStore(Protocol):
    async def add(self, record: DictionaryRecord, *, max_per_tenant: int) -> bool:
        """Store a new dictionary unless its tenant has ``max_per_tenant`` already (then ``False``)."""
        ...

    async def get(self, tenant: str, dictionary_id: str) -> DictionaryRecord | None: ...

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[DictionaryRecord]:
        """The tenant's dictionaries by id (oldest first), the first ``limit`` after the id ``after``."""
        ...

    async def rules(self, tenant: str, dictionary_id: str, version_id: str) -> tuple[Rule, ...] | None:
        """The rules of a kept version; ``None`` when the dictionary or the version is unknown."""
        ...

    async def versions(self, tenant: str, locators: Sequence[tuple[str, str | None]]) -> list[str | None]:
        """The version each ``(dictionary id, version id or None)`` names, in one round trip: a version the dictionary
        still keeps, or its latest for ``None``; ``None``: the tenant has no such dictionary, or it no longer keeps
        that version (it was dropped, :data:`KEPT_VERSIONS`)."""
        ...

    async def replace(self, updated: DictionaryRecord, *, made_from: str, dropped: Sequence[str]) -> bool | None:
        """Store ``updated`` (a new latest version) if the dictionary's latest version is still ``made_from``,
        deleting the ``dropped`` versions' rules. ``None``: the dictionary is gone; ``False``: it changed meanwhile."""
        ...

    async def forget_tenant(self, tenant: str) -> None:
        """Delete every dictionary of the tenant (the tenant was deleted)."""
        ...
