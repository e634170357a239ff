"""Starting and stopping several gateways at once, for the fixtures that need more than one.

A gateway's start is mostly its interpreter importing the project and its engine workers coming up, a few seconds
each, and a stop waits for its graceful shutdown: one after another, a fixture of three gateways waits for three of
each. Started together they overlap, in threads here (``GatewayProcess.start`` blocks until its gateway has
settled), while the other test worker of the suite may be waiting on something else.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from harness.gateway_process import GatewayProcess

__all__ = ["running_together", "start_together", "stop_together"]


def start_together(processes: Sequence[GatewayProcess], timeout_s: float = 60.0) -> None:
    """Start every gateway, all at once, and wait until each has settled. When one fails to start, those that did
    start are stopped (a failed one stops itself) before its error is raised."""
    with ThreadPoolExecutor(max_workers=max(1, len(processes))) as pool:
        futures = [pool.submit(process.start, timeout_s) for process in processes]
        errors = [error for future in futures if (error := future.exception()) is not None]
    if errors:
        stop_together([p for p, f in zip(processes, futures, strict=True) if f.exception() is None])
        raise errors[0]


def stop_together(processes: Sequence[GatewayProcess]) -> None:
    """Stop every gateway at once (``GatewayProcess.stop`` each, which waits for its shutdown)."""
    with ThreadPoolExecutor(max_workers=max(1, len(processes))) as pool:
        for future in [pool.submit(process.stop) for process in processes if process.process is not None]:
            future.result()


@contextmanager
def running_together(processes: Sequence[GatewayProcess], timeout_s: float = 60.0) -> Iterator[list[GatewayProcess]]:
    """The gateways, started together for the ``with`` block and stopped together after it."""
    start_together(processes, timeout_s)
    try:
        yield list(processes)
    finally:
        stop_together(processes)
