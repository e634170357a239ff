"""The custom voice in this process's memory, for a single replica and for tests."""

from __future__ import annotations

from gateway.speech.voices.base import CustomVoiceRecord, VoiceNameTakenError
from storage import Page

__all__ = ["MemoryVoiceStore"]


class MemoryVoiceStore:
    """Voices of one process (the embedded default)."""

    def __init__(self) -> None:
        self._voices: dict[str, dict[str, CustomVoiceRecord]] = {}

    async def add(self, voice: CustomVoiceRecord, *, max_per_tenant: int) -> bool:
        voices = self._voices.setdefault(voice.tenant, {})
        if len(voices) >= max_per_tenant:
            return False
        if any(existing.name == voice.name for existing in voices.values()):
            raise VoiceNameTakenError(voice.name)
        voices[voice.id] = voice
        return True

    async def forget_tenant(self, tenant: str) -> None:
        self._voices.pop(tenant, None)

    async def get(self, tenant: str, voice_id: str) -> CustomVoiceRecord | None:
        return self._voices.get(tenant, {}).get(voice_id)

    async def find_by_name(self, tenant: str, name: str) -> CustomVoiceRecord | None:
        return next((v for v in self._voices.get(tenant, {}).values() if v.name == name), None)

    async def list(self, tenant: str) -> list[CustomVoiceRecord]:
        return sorted(self._voices.get(tenant, {}).values(), key=lambda v: (v.created_at, v.id))

    async def page(self, tenant: str, *, after: str | None, limit: int) -> Page[CustomVoiceRecord]:
        voices = [voice for voice in await self.list(tenant) if after is None or voice.id > after]
        return Page.of(voices[: limit + 1], limit)

    async def delete(self, tenant: str, voice_id: str) -> bool:
        return self._voices.get(tenant, {}).pop(voice_id, None) is not None
