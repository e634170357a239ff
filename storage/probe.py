"""What ``/readyz`` asks of the shared Redis: whether it answers, and what an operator should fix about its memory.

Below the gateway's layers on purpose: the composition root (``gateway/services.py``) builds the probe, and the HTTP
layer hands it to the health route (``gateway/http/auth/dependencies.py``) without knowing who built it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from storage.outage import STORAGE_ERRORS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from storage.memory import EvictionPolicyCheck
    from storage.pressure import WriteRefusals
    from storage.redis import RedisClient

__all__ = ["StorageProbe"]

_PING_TIMEOUT_S = 0.5


class StorageProbe:
    """Whether the shared Redis answers, whether the gateway needs it to serve (limits that fail closed), and what
    ``/readyz`` should say of its memory: an eviction policy that may cost keys, and stores whose writes it refuses.

    A plain class, not a dataclass: Litestar would try to convert a dataclass it injects, reading its annotations.
    """

    def __init__(
        self,
        redis: RedisClient | None,
        *,
        required: bool,
        policy: EvictionPolicyCheck | None = None,
        write_refusals: Sequence[WriteRefusals] = (),
    ) -> None:
        self.redis = redis
        self.required = required
        self.policy = policy
        self.write_refusals = write_refusals

    async def state(self) -> str:
        """``ok``, ``unreachable`` or ``not configured``."""
        if self.redis is None:
            return "not configured"
        try:
            await asyncio.wait_for(self.redis.ping(), _PING_TIMEOUT_S)
            if self.policy is not None:  # read once, as soon as Redis answers
                await asyncio.wait_for(self.policy.check(), _PING_TIMEOUT_S)
        except STORAGE_ERRORS:
            return "unreachable"
        return "ok"

    def warnings(self) -> list[str]:
        """What an operator should fix about Redis memory, though a replica can serve."""
        warnings = [self.policy.warning] if self.policy is not None and self.policy.warning else []
        return warnings + [line for refusals in self.write_refusals if (line := refusals.describe())]

    def refusing_writes(self) -> list[str]:
        """The stores whose writes Redis refuses now."""
        return [refusals.store for refusals in self.write_refusals if refusals.refusing]
