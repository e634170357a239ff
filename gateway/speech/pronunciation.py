"""Tenant-scoped pronunciation dictionaries (ElevenLabs' ``/v1/pronunciation-dictionaries``): named sets of rules in
versions, and the lexicon a request is spoken with.

Every change of a dictionary's rules makes a new version with a new ``version_id``; a version never changes, so the
versions a request applies are part of its audio cache key (``gateway/speech/service.py``) and each version's compiled
lexicon can be kept in memory for as long as wanted: a request of several dictionaries joins theirs, compiling nothing
(what a compile may cost, and who waits for it: docs/pronunciation.md). A dictionary keeps its last
:data:`KEPT_VERSIONS` versions (a locator or a download naming an older one gets 404). The dictionaries themselves are
kept by a store (``gateway/speech/dictionaries/``: in memory or in Redis).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import OrderedDict
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gateway.speech.compile_process import CompileProcessError
from gateway.speech.errors import ConflictError, InvalidSpeechRequestError, OverLimitError, UnknownDictionaryError
from gateway.text.lexicon import Lexicon, Rule
from gateway.text.pls import PLSError, RuleCaps, check_rules, read_pls
from lifecycle import naming
from storage import sortable_id

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Generator, Sequence

    from gateway.speech.compile_process import CompileProcess
from gateway.speech.dictionaries.base import KEPT_VERSIONS, DictionaryRecord, DictionaryStore

__all__ = ["NO_LEXICON", "AppliedLexicon", "PronunciationDictionaries"]

logger = naming.logger("pronunciation")

_STATES_KEPT = 2_000_000
"""Automaton states of the compiled versions a replica keeps (about 300 MB at most; least recently used out first). A
version never changes, so its compiled lexicon is kept for as long as it is used."""
_COMPILE_SLICE_S = 0.001
"""How long a compile (or the loading of one compiled apart) runs on the event loop before it gives the other tasks
their turn (the most a version may hold, 64 Ki grapheme characters, take some 0.07 s to compile in all)."""
_UPDATE_TRIES = 5


@dataclass(frozen=True, slots=True)
class AppliedLexicon:
    """The lexicon a request is spoken with, and the versions it was compiled from (for the cache key)."""

    versions: tuple[tuple[str, str], ...]
    """``(dictionary id, version id)`` in the order applied."""
    lexicon: Lexicon


NO_LEXICON = AppliedLexicon((), Lexicon(()))


class _CompileBudget:
    """Each tenant's grapheme characters compiled in this process, refilled at ``per_minute`` a minute (a token
    bucket as deep as a minute's): making a new version for every request costs a compile each time, and this bounds
    how much of a replica's CPU one tenant's compiles can take, whatever else its limits let it send.

    Raises (:meth:`spend`):
        OverLimitError: ``rate_limit_exceeded``, with when to retry, when the tenant's compiles of the last minute
            spent it.
    """

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._left: dict[str, tuple[float, float]] = {}
        """Each tenant's characters left and when that was (a tenant with a full bucket has no entry)."""

    def spend(self, scope: str, characters: int) -> None:
        now = time.monotonic()
        left = self._refilled(scope, now)
        if characters > left:
            retry_after_s = math.ceil((characters - left) * 60 / self.per_minute)
            raise OverLimitError(
                f"Rate limit reached for compiling pronunciation dictionaries: {self.per_minute} grapheme characters "
                f"a minute (pronunciation.compile_characters_per_minute), and this version has {characters}; apply "
                f"versions already compiled, or retry after {retry_after_s} s.",
                kind="rate_limit_exceeded",
                retry_after_s=retry_after_s,
            )
        for full in [key for key in self._left if self._refilled(key, now) >= self.per_minute]:
            del self._left[full]
        self._left[scope] = (left - characters, now)

    def _refilled(self, scope: str, now: float) -> float:
        left, at = self._left.get(scope, (self.per_minute, now))
        return min(self.per_minute, left + (now - at) * self.per_minute / 60)


def _invalid_rules(exc: PLSError) -> InvalidSpeechRequestError:
    return InvalidSpeechRequestError(str(exc), kind="invalid_pronunciation_rules", param="rules")


class PronunciationDictionaries:
    """Creates and changes a tenant's dictionaries within its caps, and compiles the lexicon of a request.

    Raises (every method that changes or reads by id):
        UnknownDictionaryError: an id (or version) the tenant does not have.
        InvalidSpeechRequestError: rules over the caps or malformed, or one dictionary more than ``max_per_tenant``.
        ConflictError: other requests kept changing the dictionary.
    """

    def __init__(
        self,
        store: DictionaryStore,
        *,
        max_per_tenant: int,
        caps: RuleCaps,
        max_file_bytes: int = 1 << 20,
        compile_characters_per_minute: int = 1 << 20,
        compile_process: CompileProcess | None = None,
    ) -> None:
        """``compile_process``: where versions are compiled (``gateway/speech/compile_process.py``); without one, on
        the event loop in slices."""
        self.store = store
        self._compile_process = compile_process
        self.max_per_tenant = max_per_tenant
        self.caps = caps
        self.max_file_bytes = max_file_bytes
        """The largest PLS file read (``pronunciation.max_file_bytes``)."""
        self._lexicons: OrderedDict[tuple[str, str, str], Lexicon] = OrderedDict()
        """Compiled versions by ``(tenant scope, dictionary id, version id)``, least recently used first."""
        self._states = 0
        self._turns: dict[str, tuple[asyncio.Lock, int]] = {}
        """Each tenant's compile lock and how many requests hold or wait for it (gone when none)."""
        self._compiling = asyncio.Lock()
        """One compile at a time in this process: a compile holds the GIL, two at once would only share it."""
        self.compiles = 0
        """Versions compiled by this process (a new combination of compiled versions compiles none)."""
        self._compile_budget = _CompileBudget(max(compile_characters_per_minute, caps.max_grapheme_chars_total))

    async def create(self, tenant: str, name: str, description: str | None, rules: Sequence[Rule]) -> DictionaryRecord:
        self.check(rules)
        version = sortable_id("")
        record = DictionaryRecord(
            id=sortable_id("pd_"), tenant=tenant, name=name, description=description, created_at=time.time(),
            version_id=version, rules=tuple(rules), versions=(version,),
        )  # fmt: skip
        if not await self.store.add(record, max_per_tenant=self.max_per_tenant):
            raise InvalidSpeechRequestError(
                f"Your tenant has {self.max_per_tenant} pronunciation dictionaries, the most it may keep.",
                kind="pronunciation_dictionary_limit_reached",
            )
        return record

    async def file_rules(self, document: bytes) -> list[Rule]:
        """The rules of an uploaded PLS file, read in the compile process (untrusted XML, read apart and within
        :attr:`caps`); here only without one, or when it ended (its next task starts a new one).

        Raises:
            PLSError: not a PLS lexicon this gateway reads, or over the caps.
        """
        if self._compile_process is not None:
            with contextlib.suppress(CompileProcessError):
                return await self._compile_process.pls_rules(document, self.caps)
        return read_pls(document, self.caps)

    def check(self, rules: Sequence[Rule]) -> None:
        """Refuse rules over the caps or malformed (400)."""
        try:
            check_rules(rules, self.caps)
        except PLSError as exc:
            raise _invalid_rules(exc) from None

    async def get(self, tenant: str, dictionary_id: str) -> DictionaryRecord:
        record = await self.store.get(tenant, dictionary_id)
        if record is None:
            raise UnknownDictionaryError(dictionary_id)
        return record

    async def version_rules(self, tenant: str, dictionary_id: str, version_id: str) -> tuple[Rule, ...]:
        rules = await self.store.rules(tenant, dictionary_id, version_id)
        if rules is None:
            raise UnknownDictionaryError(dictionary_id, version_id)
        return rules

    async def add_rules(self, tenant: str, dictionary_id: str, rules: Sequence[Rule]) -> DictionaryRecord:
        """A new version with ``rules`` added; a rule of a grapheme the dictionary has replaces it (as ElevenLabs)."""
        added = {rule.grapheme for rule in rules}
        return await self._change(
            tenant, dictionary_id, lambda old: (*(r for r in old if r.grapheme not in added), *rules)
        )

    async def set_rules(self, tenant: str, dictionary_id: str, rules: Sequence[Rule]) -> DictionaryRecord:
        """A new version with exactly ``rules``."""
        return await self._change(tenant, dictionary_id, lambda _: tuple(rules))

    async def remove_rules(self, tenant: str, dictionary_id: str, graphemes: Sequence[str]) -> DictionaryRecord:
        """A new version without the rules of ``graphemes`` (``rule_strings`` in ElevenLabs' words)."""
        removed = set(graphemes)
        return await self._change(tenant, dictionary_id, lambda old: tuple(r for r in old if r.grapheme not in removed))

    async def _change(
        self, tenant: str, dictionary_id: str, change: Callable[[tuple[Rule, ...]], tuple[Rule, ...]]
    ) -> DictionaryRecord:
        for _ in range(_UPDATE_TRIES):
            current = await self.get(tenant, dictionary_id)
            rules = change(current.rules)
            self.check(rules)
            version = sortable_id("")
            kept = (*current.versions, version)
            updated = replace(current, version_id=version, rules=rules, versions=kept[-KEPT_VERSIONS:])
            done = await self.store.replace(
                updated, made_from=current.version_id, dropped=kept[: max(0, len(kept) - KEPT_VERSIONS)]
            )
            if done is None:
                raise UnknownDictionaryError(dictionary_id)
            if done:
                return updated
        raise ConflictError(
            f"The pronunciation dictionary '{dictionary_id}' is being changed by other requests; try again."
        )

    async def lexicon(
        self,
        tenant: str,
        locators: Sequence[tuple[str, str | None]],
        *,
        missing_ok: bool = False,
        generation: str = "",
    ) -> AppliedLexicon:
        """The lexicon of the dictionaries ``locators`` name (``(id, version id or None for the latest)``), in order;
        ``missing_ok``: a dictionary the tenant does not have is skipped (a tenant's defaults), with a warning;
        ``generation``: the tenant's (a tenant deleted and made again never reaches what the old one compiled).

        Raises:
            UnknownDictionaryError: a dictionary or version the tenant does not have.
        """
        if not locators:
            return NO_LEXICON
        # Every version is looked up in the store, a pinned one too: compiled here before, one dropped since must be
        # refused here as on the replicas that never compiled it.
        found = await self.store.versions(tenant, locators)
        versions: list[tuple[str, str]] = []
        for (dictionary_id, pinned), version_id in zip(locators, found, strict=True):
            if version_id is not None:
                versions.append((dictionary_id, version_id))
            elif missing_ok and pinned is None:
                logger.warning("tenant %s has no pronunciation dictionary %s (a default)", tenant, dictionary_id)
            else:
                raise UnknownDictionaryError(dictionary_id, pinned)
        if not versions:
            return NO_LEXICON
        scope = f"{tenant}#{generation}"
        compiled = [
            await self._compiled(scope, tenant, dictionary_id, version_id) for dictionary_id, version_id in versions
        ]
        return AppliedLexicon(tuple(versions), compiled[0] if len(compiled) == 1 else Lexicon.joined(compiled))

    async def _compiled(self, scope: str, tenant: str, dictionary_id: str, version_id: str) -> Lexicon:
        """The compiled lexicon of one version: from memory, else compiled once (:meth:`_compile`)."""
        key = (scope, dictionary_id, version_id)
        if (compiled := self._lexicons.get(key)) is not None:
            self._lexicons.move_to_end(key)
            return compiled
        async with self._tenant_turn(scope):  # one compile of the tenant's at a time: tenants compile in turn
            if (compiled := self._lexicons.get(key)) is not None:  # compiled while this request waited
                return compiled
            rules = await self.version_rules(tenant, dictionary_id, version_id)
            self._compile_budget.spend(scope, sum(len(rule.grapheme) for rule in rules))
            async with self._compiling:
                compiled = await self._compile(rules)
        self._keep(key, compiled)
        return compiled

    async def _compile(self, rules: Sequence[Rule]) -> Lexicon:
        """Compile ``rules`` in the compile process and load its tables on the event loop in slices; without one (or
        when it ended), compile them on the loop in slices. (A worker thread does not help: the compile is pure
        Python, and a thread holding the GIL made the loop wait 7 to 57 ms of the compile at a time: its switch
        interval, 5 ms, or more.)"""
        self.compiles += 1
        if self._compile_process is not None:
            try:
                tables = await self._compile_process.tables(rules)
            except CompileProcessError:
                pass  # compiled here this once (the process said why it ended); the next compile starts a new one
            else:
                return await _in_slices(Lexicon.loading(rules, tables))
        return await _in_slices(Lexicon.building(rules))

    @asynccontextmanager
    async def _tenant_turn(self, scope: str) -> AsyncIterator[None]:
        """Hold the tenant's compile lock: each tenant has at most one compile waiting for the process's, so the
        process's lock (first come, first served) serves tenants in turn, however many requests one of them sends."""
        lock, users = self._turns.get(scope, (asyncio.Lock(), 0))
        self._turns[scope] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._turns[scope]
            if users == 1:
                del self._turns[scope]
            else:
                self._turns[scope] = (lock, users - 1)

    def _keep(self, key: tuple[str, str, str], compiled: Lexicon) -> None:
        if (replaced := self._lexicons.pop(key, None)) is not None:
            self._states -= replaced.size
        self._lexicons[key] = compiled
        self._states += compiled.size
        while self._states > _STATES_KEPT and len(self._lexicons) > 1:
            _, evicted = self._lexicons.popitem(last=False)
            self._states -= evicted.size


async def _in_slices(steps: Generator[None, None, Lexicon]) -> Lexicon:
    """Run ``steps`` on the event loop in slices of :data:`_COMPILE_SLICE_S`, giving every other task its turn between
    two: a request of another tenant waits a slice, not the whole."""
    deadline = time.perf_counter() + _COMPILE_SLICE_S
    while True:
        try:
            next(steps)
        except StopIteration as done:
            compiled: Lexicon = done.value
            return compiled
        if time.perf_counter() >= deadline:
            await asyncio.sleep(0)
            deadline = time.perf_counter() + _COMPILE_SLICE_S
