"""Workers forked from a template process that has imported their engine's modules (``engines/template.py``):
real templates, real pools of the synthetic engine; ``tests/e2e/test_chattts.py`` checks the same of ChatTTS."""

from __future__ import annotations

import asyncio
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from engines.base import SynthesisRequest
from engines.pool import EnginePool
from engines.settings import local_engine_settings
from engines.template import WorkerTemplates
from engines.template_process import TemplateStart
from tests.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

pytestmark = pytest.mark.slow  # starts engine worker processes: left out of `make quick`


@pytest.fixture
async def templates() -> AsyncIterator[WorkerTemplates]:
    own = WorkerTemplates()  # not the process's shared ones: these tests kill templates
    yield own
    own.stop()


@pytest.fixture
async def make_pool(templates: WorkerTemplates) -> AsyncIterator[Callable[..., Any]]:
    pools: list[EnginePool] = []

    async def make(*, using: WorkerTemplates = templates, **settings: Any) -> EnginePool:
        pool = EnginePool("test", local_engine_settings(kind="synthetic", **settings), templates=using)
        pools.append(pool)
        await pool.start()
        assert await pool.wait_ready(30)
        return pool

    yield make
    for pool in pools:
        await pool.stop()


def parent_of(pid: int) -> int:
    return psutil.Process(pid).ppid()


async def speak(pool: EnginePool, text: str = "hello there") -> int:
    async with pool.open_stream(SynthesisRequest(text=text, voice="nova")) as stream:
        return sum([len(chunk) async for chunk in stream])


async def test_workers_are_forked_from_a_template_that_imported_the_engine(
    make_pool: Callable[..., Any], templates: WorkerTemplates
) -> None:
    pool = await make_pool(workers=2)
    template = templates.of("synthetic")
    assert template.pid is not None
    # The pool is ready with its first worker; the second may still be forking.
    await wait_for(lambda: len(pool.status().pids) == 2, 30, "both workers forked")
    assert [parent_of(pid) for pid in pool.status().pids] == [template.pid, template.pid]
    maps = Path(f"/proc/{template.pid}/maps").read_text()
    assert "numpy" in maps, "the template imported the engine's modules before forking"
    assert await speak(pool) > 0


async def test_a_killed_worker_is_forked_again_with_its_exit_code_known(
    make_pool: Callable[..., Any], templates: WorkerTemplates, caplog: pytest.LogCaptureFixture
) -> None:
    pool = await make_pool()
    [victim] = pool.status().pids
    os.kill(victim, signal.SIGKILL)
    await wait_for(lambda: pool.status().ready_workers == 1 and pool.status().restarts == 1, what="a replacement")
    [replacement] = pool.status().pids
    assert replacement != victim
    assert parent_of(replacement) == templates.of("synthetic").pid
    assert templates.of("synthetic").starts == 1, "the same template forked both"
    assert f"worker pid {victim} ended: exit code -9" in caplog.text
    assert await speak(pool) > 0


async def test_a_dead_template_is_replaced_before_a_worker_needs_it(
    make_pool: Callable[..., Any], templates: WorkerTemplates
) -> None:
    pool = await make_pool()
    template = templates.of("synthetic")
    first = template.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    await wait_for(lambda: template.starts == 2 and template.pid != first, what="a new template")
    assert await speak(pool) > 0, "the worker forked by the dead template still serves"
    [victim] = pool.status().pids
    os.kill(victim, signal.SIGKILL)
    await wait_for(lambda: pool.status().ready_workers == 1 and pool.status().restarts == 1, what="a replacement")
    [replacement] = pool.status().pids
    assert parent_of(replacement) == template.pid
    assert await speak(pool) > 0


async def test_stopping_the_pool_ends_workers_whose_template_died(
    make_pool: Callable[..., Any], templates: WorkerTemplates
) -> None:
    pool = await make_pool(workers=2)
    pids = pool.status().pids
    template_pid = templates.of("synthetic").pid
    assert template_pid is not None
    os.kill(template_pid, signal.SIGKILL)
    await pool.stop()
    await wait_for(lambda: not any(psutil.pid_exists(pid) for pid in pids), what="the orphaned workers' end")


async def test_a_template_that_never_gets_ready_leaves_workers_to_start_cold(
    make_pool: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    slow = WorkerTemplates(ready_timeout_s=0.001)  # no template imports numpy that fast
    try:
        pool = await make_pool(using=slow)
        [worker] = pool.status().pids
        assert parent_of(worker) == os.getpid(), "started as a fresh interpreter by this process"
        assert "starting its worker cold" in caplog.text
        assert await speak(pool) > 0
        await pool.stop()
    finally:
        slow.stop()


async def test_without_warm_start_workers_are_fresh_interpreters(
    make_pool: Callable[..., Any], templates: WorkerTemplates
) -> None:
    pool = await make_pool(warm_start=False)
    [worker] = pool.status().pids
    assert parent_of(worker) == os.getpid()
    assert templates.of("synthetic").pid is None, "no template was started"
    assert await speak(pool) > 0
    os.kill(worker, signal.SIGKILL)
    await wait_for(lambda: pool.status().ready_workers == 1 and pool.status().restarts == 1, what="a replacement")
    [replacement] = pool.status().pids
    assert parent_of(replacement) == os.getpid()
    assert await speak(pool) > 0


async def test_stopping_a_pool_while_its_template_imports_leaves_no_worker(templates: WorkerTemplates) -> None:
    pool = EnginePool("test", local_engine_settings(kind="synthetic"), templates=templates)
    await pool.start()
    await wait_for(lambda: templates.of("synthetic").pid is not None, what="the template's start")
    await pool.stop()
    template_pid = templates.of("synthetic").pid
    assert template_pid is not None
    await asyncio.sleep(0)
    await wait_for(
        lambda: all(child.status() == psutil.STATUS_ZOMBIE for child in psutil.Process(template_pid).children()),
        what="no live worker forked for the stopped pool",
    )
    assert pool.status().pids == ()


async def test_an_engine_without_its_weights_starts_cold_and_costs_no_template(
    templates: WorkerTemplates, tmp_path: Path
) -> None:
    # The template would import torch (seconds, and hundreds of MB kept) for an engine that cannot load; a cold worker
    # finds the weights missing in milliseconds, without torch, and says so.
    missing = tmp_path / "not-mounted-yet"
    options = {"source": "dir", "path": str(missing)}
    pool = EnginePool("chattts", local_engine_settings(kind="chattts", options=options), templates=templates)
    await pool.start()
    try:
        assert not await pool.wait_ready(30)
        assert str(missing) in (pool.status().reason or "")
        assert templates.of("chattts").pid is None, "no template was started"
    finally:
        await pool.stop()


def test_a_template_whose_server_closes_its_socket_ends_quietly() -> None:
    # A server stopping closes the socket with the template's answer still unread in it: the template reads a reset,
    # not an end of file, and must end as quietly (no traceback on stderr, where no log line would carry it).
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with theirs:
        template = subprocess.Popen(
            [sys.executable, "-m", "engines.template_process", str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(theirs.fileno(),),
        )
    with ours:
        ours.sendall(pickle.dumps(TemplateStart("synthetic", [entry for entry in sys.path if entry])))
        select.select([ours], [], [], 30)  # its answer has arrived: left unread
    _, stderr = template.communicate(timeout=30)
    assert (template.returncode, stderr.decode()) == (0, "")
