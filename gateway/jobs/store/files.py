"""Segments' audio as files on a volume every replica mounts: :class:`AudioFiles`."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
from typing import TYPE_CHECKING

from gateway.jobs.records import now_s
from lifecycle import naming
from storage import STORAGE_ERRORS

if TYPE_CHECKING:
    from pathlib import Path

    from gateway.jobs.store.base import JobStore


__all__ = ["AudioFiles"]

logger = naming.logger("jobs")
_SAFE_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")


class AudioFiles:
    """Segments' audio as files under a directory every replica mounts (``jobs.directory``: a ReadWriteMany volume),
    one per segment at ``<root>/<tenant>/<job id>/<index>.<name>``, written whole (a temporary name, then renamed)
    before its commit, which records the name: a runner whose commit is refused (the segment was taken) removes its
    own file and never replaces the one committed. Files do not expire by themselves: :meth:`sweep` removes those of
    jobs whose audio expired or is gone."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, tenant: str, job_id: str, index: int | None = None, name: str = "") -> Path:
        if not (_SAFE_NAME.match(tenant) and _SAFE_NAME.match(job_id) and (not name or _SAFE_NAME.match(name))):
            raise ValueError("a tenant, job id or file name that is no plain file name")
        folder = self.root / tenant / job_id
        return folder if index is None else folder / f"{index:06d}.{name}"

    async def put(self, tenant: str, job_id: str, index: int, audio: bytes) -> str:
        """Write the segment's audio under a new name, and return the name."""
        name = secrets.token_hex(8)
        await asyncio.to_thread(_write_whole, self._path(tenant, job_id, index, name), audio)
        return name

    async def discard(self, tenant: str, job_id: str, index: int, name: str) -> None:
        await asyncio.to_thread(self._path(tenant, job_id, index, name).unlink, True)

    async def get(self, tenant: str, job_id: str, index: int, name: str) -> bytes | None:
        return await asyncio.to_thread(_read_or_none, self._path(tenant, job_id, index, name))

    async def drop(self, tenant: str, job_id: str) -> None:
        await asyncio.to_thread(shutil.rmtree, self._path(tenant, job_id), True)

    async def sweep(self, store: JobStore) -> int:
        """Remove the files of every job whose record is gone or whose audio expired; returns how many jobs."""
        removed = 0
        for tenant, job_id in await asyncio.to_thread(self._jobs):
            record = await store.get(tenant, job_id)
            if record is None or (record.expires_at is not None and now_s() >= record.expires_at):
                await self.drop(tenant, job_id)
                removed += 1
        return removed

    async def sweep_forever(self, store: JobStore, every_s: float) -> None:
        """:meth:`sweep` every ``every_s`` (on every replica: each removal is idempotent), until cancelled."""
        while True:
            await asyncio.sleep(every_s)
            try:
                await self.sweep(store)
            except STORAGE_ERRORS as exc:  # Redis or the volume (an OSError) out of reach: the next round tries again
                logger.warning("could not sweep the jobs' audio files: %r", exc)

    def _jobs(self) -> list[tuple[str, str]]:
        if not self.root.is_dir():
            return []
        return [(t.name, j.name) for t in self.root.iterdir() if t.is_dir() for j in t.iterdir() if j.is_dir()]


def _write_whole(path: Path, audio: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(audio)
    temporary.replace(path)  # a reader sees the whole file or none


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
