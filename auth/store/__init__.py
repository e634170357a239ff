"""Where tenants and API keys live: in memory (one process) or in Redis (shared by every replica).

The contract is :class:`AuthStore` (``base.py``, with the rules both stores follow); :class:`MemoryAuthStore`
(``memory.py``) and :class:`RedisAuthStore` (``redis.py``) implement it, and one contract suite
(``tests/unit/auth/test_store_contract.py``) runs against both.

The stores here answer from their backend every time; a replica's memory of recent answers, invalidated by the
revocation channel, is :mod:`auth.cached`. What they hold is bounded by what exists: a deleted tenant takes its key
records with it, and a revoked key leaves its record only for ``revoked_retention_s`` (for the audit listing), except
a key issued out of band (configured by its hash), whose revoked record stays so that re-seeding the configuration
cannot bring it back.
"""

from __future__ import annotations

from auth.store.base import DEFAULT_REVOKED_RETENTION_S, AuthStore, ForwardingAuthStore
from auth.store.memory import MemoryAuthStore
from auth.store.redis import RedisAuthStore

__all__ = ["DEFAULT_REVOKED_RETENTION_S", "AuthStore", "ForwardingAuthStore", "MemoryAuthStore", "RedisAuthStore"]
