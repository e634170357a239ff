"""Where pronunciation dictionaries live: in memory (one process) or in Redis (shared by every replica).

The contract is :class:`DictionaryStore` (``base.py``); :class:`MemoryDictionaryStore` (``memory.py``) and
:class:`RedisDictionaryStore` (``redis.py``) implement it, and one contract suite
(``tests/unit/gateway/test_pronunciation_store.py``) runs against both. A tenant only ever sees its own dictionaries:
another tenant's id answers "not found", so ids do not leak.
"""

from __future__ import annotations

from gateway.speech.dictionaries.base import KEPT_VERSIONS, DictionaryRecord, DictionaryStore
from gateway.speech.dictionaries.memory import MemoryDictionaryStore
from gateway.speech.dictionaries.redis import RedisDictionaryStore

__all__ = ["KEPT_VERSIONS", "DictionaryRecord", "DictionaryStore", "MemoryDictionaryStore", "RedisDictionaryStore"]
