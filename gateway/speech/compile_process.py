"""A process apart that compiles pronunciation dictionary versions (``gateway/speech/pronunciation.py``), and reads
the PLS files tenants upload (untrusted XML: read apart, within caps, as uploaded media is).

A version's compile is some 0.07 s of pure Python (up to 64 Ki grapheme characters). Run on the event loop, even in
1 ms slices, it took that much of the loop's CPU from every other tenant's requests (their p90 first byte rose to 3.5
to 5 times idle); in a thread it held the interpreter for 5 ms and more at a time. Here it runs in one process of its
own, at a lower CPU priority (as upload decoders do, ``gateway/uploads/``), and sends back flat arrays
(:data:`~gateway.text.lexicon.CompiledTables`): the gateway spends a copy of them and a few C-speed dictionary updates
on the loop, in slices (:meth:`~gateway.text.lexicon.Lexicon.loading`), a tenth of the compile.

The process starts on the first compile (``concurrent.futures`` starts its workers on demand: a replica whose tenants
compile nothing never starts it; the first compile waits for its start, about a second) and ends with the app.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, TypeVar

from gateway.text.lexicon import compiled_tables
from gateway.text.pls import read_pls
from lifecycle import naming
from lifecycle.signals import leave_stopping_to_the_server

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from gateway.text.lexicon import CompiledTables, Rule
    from gateway.text.pls import RuleCaps

__all__ = ["CompileProcess", "CompileProcessError"]

logger = naming.logger("pronunciation")

T = TypeVar("T")

COMPILE_NICENESS = 10
"""How much lower than the gateway's the compile process's CPU priority is: speech and other tenants' requests first."""


class CompileProcessError(Exception):
    """The compile process ended before it answered (killed, out of memory); the next compile starts a new one."""


class CompileProcess:
    """One compile at a time, in a process apart (``spawn``ed: nothing of the gateway's threads or sockets)."""

    def __init__(self) -> None:
        self._executor = self._started()
        self.compiles = 0
        """Versions this process compiled."""

    @staticmethod
    def _started() -> ProcessPoolExecutor:
        context = multiprocessing.get_context("spawn")
        return ProcessPoolExecutor(1, mp_context=context, initializer=_start_compiling)

    async def tables(self, rules: Sequence[Rule]) -> CompiledTables:
        """The compiled tables of ``rules`` (:func:`~gateway.text.lexicon.compiled_tables`).

        Raises:
            CompileProcessError: the process ended before it answered.
        """
        tables = await self._run(compiled_tables, tuple(rules))
        self.compiles += 1
        return tables

    async def pls_rules(self, document: bytes, caps: RuleCaps) -> list[Rule]:
        """The rules of the PLS ``document`` (:func:`~gateway.text.pls.read_pls`), read in the process.

        Raises:
            PLSError: not a PLS lexicon this gateway reads, or over ``caps``.
            CompileProcessError: the process ended before it answered.
        """
        return await self._run(read_pls, document, caps)

    async def _run(self, function: Callable[..., T], *args: object) -> T:
        try:
            return await asyncio.wrap_future(self._executor.submit(function, *args))
        except BrokenProcessPool:
            logger.warning("the pronunciation compile process ended before it answered; starting a new one")
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = self._started()
            raise CompileProcessError from None

    def close(self) -> None:
        """End the process (a compile under way is dropped: its request is ending with the app)."""
        self._executor.shutdown(wait=True, cancel_futures=True)


def _start_compiling() -> None:
    """The compile process's first steps: a stop signal sent to the server's whole group is the server's to act on
    (``lifecycle/signals.py``: it ends this process with the app), and other tenants' requests come first."""
    leave_stopping_to_the_server()
    os.nice(COMPILE_NICENESS)
