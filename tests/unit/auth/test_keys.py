"""API keys: entropy, shape, hashing and what may be shown of them."""

from __future__ import annotations

import hashlib
import string

import pytest

from auth import ANONYMOUS, API_KEY_PREFIX, generate_api_key, hash_api_key, key_hint, looks_like_api_key
from auth.keys import ApiKeyRecord, is_key_hash
from auth.settings import TenantLimits, TenantSettings
from auth.tenants import tenant_from_settings

BASE64URL = set(string.ascii_letters + string.digits + "-_")


def test_keys_are_long_random_and_url_safe() -> None:
    keys = [generate_api_key() for _ in range(10_000)]
    assert len(set(keys)) == len(keys)
    for key in keys:
        assert key.startswith(API_KEY_PREFIX)
        assert len(key) == len(API_KEY_PREFIX) + 43  # 256 bits in base64url
        assert set(key.removeprefix(API_KEY_PREFIX)) <= BASE64URL
        assert looks_like_api_key(key)
    # All 64 symbols turn up within 200 keys (8600 characters): the alphabet is not skewed or cut short.
    assert set("".join(k.removeprefix(API_KEY_PREFIX) for k in keys[:200])) == BASE64URL


def test_looks_like_api_key_checks_prefix_length_and_charset() -> None:
    key = generate_api_key()
    secret = key.removeprefix(API_KEY_PREFIX)
    assert not looks_like_api_key(key[:-1])
    assert not looks_like_api_key(key + "a")
    assert not looks_like_api_key("sk-" + secret)
    assert not looks_like_api_key(API_KEY_PREFIX + secret[:-1] + "=")
    assert not looks_like_api_key(API_KEY_PREFIX + secret[:-1] + "+")
    assert not looks_like_api_key(f" {key}")
    assert not looks_like_api_key(f"{key}\n")


def test_hash_is_hex_sha256() -> None:
    assert hash_api_key("abc") == hashlib.sha256(b"abc").hexdigest()
    assert is_key_hash(hash_api_key(generate_api_key()))
    assert not is_key_hash(hash_api_key("abc").upper())


def test_hint_shows_prefix_and_last_four_only() -> None:
    key = generate_api_key()
    assert key_hint(key) == f"sk-tts-...{key[-4:]}"


def test_records_are_immutable() -> None:
    record = ApiKeyRecord(id="key_1", tenant="acme", key_hash="0" * 64, created_at=0.0)
    with pytest.raises(AttributeError):
        record.revoked = True  # type: ignore[misc]


def test_tenants_from_settings() -> None:
    limited = tenant_from_settings(
        TenantSettings(name="acme", models=["tts-1"], limits=TenantLimits(requests_per_minute=5))
    )
    assert limited.allows_model("tts-1")
    assert not limited.allows_model("espeak")
    assert limited.limits.requests_per_minute == 5
    assert tenant_from_settings(TenantSettings(name="open")).allows_model("anything")
    assert not tenant_from_settings(TenantSettings(name="none", models=[])).allows_model("tts-1")
    assert ANONYMOUS.name == "anonymous"
    assert ANONYMOUS.allows_model("anything")
    assert all(limit is None for limit in ANONYMOUS.limits.model_dump().values())  # a gateway running open
