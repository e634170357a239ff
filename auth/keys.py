"""API keys: generation, hashing and the record a store keeps (never the key itself)."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

__all__ = [
    "API_KEY_PREFIX",
    "ApiKeyRecord",
    "generate_api_key",
    "hash_api_key",
    "hash_hint",
    "is_key_hash",
    "key_hint",
    "looks_like_api_key",
]

API_KEY_PREFIX = "sk-tts-"
_SECRET_BYTES = 32  # 256 bits
_SECRET_CHARS = 43  # len(base64url(32 bytes)) without padding
_KEY_PATTERN = re.compile(rf"{re.escape(API_KEY_PREFIX)}[A-Za-z0-9_-]{{{_SECRET_CHARS}}}")
_HASH_PATTERN = re.compile(r"[0-9a-f]{64}")


def generate_api_key() -> str:
    """A new API key: ``sk-tts-`` and 256 random bits from :mod:`secrets`, base64url (50 characters in all)."""
    return API_KEY_PREFIX + secrets.token_urlsafe(_SECRET_BYTES)


def hash_api_key(key: str) -> str:
    """The hex SHA-256 of ``key``: what stores keep and look keys up by.

    A fast unsalted hash is right here, unlike for passwords: the keys carry 256 random bits, so neither a dictionary
    nor brute force can invert the hash, and a slow KDF would only cost time on every request.
    """
    return hashlib.sha256(key.encode()).hexdigest()


def looks_like_api_key(value: str) -> bool:
    """Whether ``value`` has the shape of a key from :func:`generate_api_key` (prefix, length, charset)."""
    return _KEY_PATTERN.fullmatch(value) is not None


def is_key_hash(value: str) -> bool:
    """Whether ``value`` is a lowercase hex SHA-256, as :func:`hash_api_key` returns."""
    return _HASH_PATTERN.fullmatch(value) is not None


def key_hint(key: str) -> str:
    """What may be shown of a key: ``sk-tts-...abcd`` (the prefix and the last 4 characters)."""
    return f"{API_KEY_PREFIX}...{key[-4:]}"


def hash_hint(key_hash: str) -> str:
    """What may be shown of a key configured by its hash, which the gateway never saw: ``sha256:5e2bf57d...``, the
    start of the hash as the configuration lists it (``api_key_sha256``), so that an operator can tell which entry a
    listed key is; nothing of the key itself."""
    return f"sha256:{key_hash[:8]}..."


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """What a store keeps about one API key.

    Attributes:
        id: Stable identifier, safe for logs and the admin API (``key_`` and 16 hex digits).
        tenant: Name of the tenant the key authenticates as.
        key_hash: Hex SHA-256 of the key; the key itself is never stored.
        created_at: Unix time of creation.
        revoked: A revoked key authenticates nobody; records are kept for audit.
        hint: ``sk-tts-...abcd``, safe to show; empty for keys issued out of band (only their hash is known: the
            stores tell such keys by it), which :attr:`shown_hint` shows by their hash instead.
    """

    id: str
    tenant: str
    key_hash: str
    created_at: float
    revoked: bool = False
    hint: str = ""

    @property
    def shown_hint(self) -> str:
        """What a listing shows of the key: its :attr:`hint`, or for a key configured by its hash, :func:`hash_hint`."""
        return self.hint or hash_hint(self.key_hash)
