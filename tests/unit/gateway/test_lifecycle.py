"""Start-up and shutdown are exception-safe: whichever step fails, what was started is stopped.

The app is the real one with real engine worker processes (two synthetic engines) and a real redis-server; each
start-up step in turn is made to fail, and afterwards no worker process, background task or metric is left behind.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import psutil
import pytest

from auth.errors import AuthBackendError
from engines.factory import create_backend
from gateway.app import create_app
from gateway.settings import Settings
from harness.gateway_process import closed_port, exact_engines

if TYPE_CHECKING:
    from collections.abc import Callable

    from engines.backend import EngineBackend
    from engines.settings import AnyEngineSettings


class StartUpFailedError(Exception):
    """The failure a test injects into one step of the start-up."""


def settings(redis_url: str, **extra: Any) -> Settings:
    config = {
        "redis_url": redis_url,
        "auth": {"admin_token": "a" * 40, "tenants": [{"name": "acme"}]},
        "engines": {"first": {"kind": "synthetic", "workers": 1}, "second": {"kind": "synthetic", "workers": 1}},
        "aliases": {},
        **extra,
    }
    return Settings.model_validate(exact_engines(config))


def failing(step: str) -> Callable[..., Any]:
    async def fail(*_: object, **__: object) -> None:
        raise StartUpFailedError(step)

    return fail


def failing_now(*_: object, **__: object) -> None:
    raise StartUpFailedError("registering the pool metrics")


def second_pool_fails(name: str, engine: AnyEngineSettings) -> EngineBackend:
    pool = create_backend(name, engine)
    if name == "second":
        pool.start = failing("the second engine's start")  # type: ignore[method-assign]
    return pool


def engine_workers() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True) if "spawn_main" in " ".join(_cmd(child))}


def _cmd(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


async def start_then_fail(app_settings: Settings, **options: Any) -> BaseException:
    """Run the app's start-up, which must fail; the failure (Litestar's lifespan wraps it in exception groups)."""
    app = create_app(app_settings, **options)
    failure: BaseException | None = None
    try:
        async with app.lifespan():
            pass
    except BaseException as exc:  # unwrapped and checked below
        failure = exc
    while isinstance(failure, BaseExceptionGroup) and len(failure.exceptions) == 1:
        failure = failure.exceptions[0]
    assert isinstance(failure, StartUpFailedError | AuthBackendError), failure
    return failure


@pytest.mark.parametrize(
    "target",
    [
        "gateway.services.RedisRevocationBus.start",
        "gateway.services.seed_tenants",
        "gateway.services.AudioCache.start",
        "storage.probe.StorageProbe.state",
        "gateway.app.PoolCollector",
    ],
)
async def test_a_failing_start_up_step_leaves_nothing_running(
    target: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before_workers, before_tasks = engine_workers(), asyncio.all_tasks()
    with monkeypatch.context() as patched:
        patched.setattr(target, failing_now if target == "gateway.app.PoolCollector" else failing(target))
        await start_then_fail(settings(redis_url))
    await _assert_nothing_left(before_workers, before_tasks)


async def test_an_engine_that_fails_to_start_stops_the_ones_started(redis_url: str) -> None:
    before_workers, before_tasks = engine_workers(), asyncio.all_tasks()
    await start_then_fail(settings(redis_url), pool_factory=second_pool_fails)
    await _assert_nothing_left(before_workers, before_tasks)


async def test_an_unreachable_redis_at_seeding_stops_the_engine_workers() -> None:
    """The issue's case: tenants to seed and Redis out of reach (a port nobody listens on)."""
    before_workers, before_tasks = engine_workers(), asyncio.all_tasks()
    failure = await start_then_fail(settings(f"redis://127.0.0.1:{closed_port()}/0"))
    assert isinstance(failure, AuthBackendError)
    await _assert_nothing_left(before_workers, before_tasks)


async def _assert_nothing_left(before_workers: set[int], before_tasks: set[asyncio.Task[Any]]) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while engine_workers() - before_workers and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    assert engine_workers() - before_workers == set(), "engine worker processes outlived a failed start-up"
    await asyncio.sleep(0)  # tasks cancelled by the unwinding end at their next turn
    left = [task for task in asyncio.all_tasks() - before_tasks if not task.done()]
    assert [task.get_name() for task in left if task is not asyncio.current_task()] == []
    # The metrics were unregistered: another app can start in this process.
    async with create_app(
        Settings.model_validate(exact_engines({"engines": {"only": {"kind": "synthetic"}}}))
    ).lifespan():
        pass
