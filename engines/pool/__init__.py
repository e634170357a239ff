"""A pool of engine worker processes, driven from the server's event loop.

Each worker is a process holding one engine (``engines.worker``). The pool's scheduler (``engines.scheduling``) hands
the workers' slots to requests, from bounded per-tenant queues served fairly across tenants (beyond the bounds:
:class:`EngineOverloadedError`); the pool streams PCM back as the worker produces it, cancels jobs whose consumer
went away, and replaces workers that die, hang or stop answering. Voice samples (:meth:`EnginePool.speaker_from_sample`)
go to a ready worker outside the scheduler's slots: the worker encodes them between the steps of what it runs.
"""

from __future__ import annotations

from engines.pool.engine_pool import EnginePool
from engines.pool.stream import SynthesisStream

__all__ = ["EnginePool", "SynthesisStream"]
