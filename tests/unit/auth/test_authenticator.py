"""The authenticator: from an Authorization header to a principal, with OpenAI-style refusals that leak nothing."""

from __future__ import annotations

import time

import fakeredis
import jwt
import pytest
from pydantic import SecretStr

from auth import (
    ANONYMOUS,
    AuthBackendError,
    Authenticator,
    InvalidCredentialsError,
    JWTVerifier,
    MemoryAuthStore,
    Principal,
    RedisAuthStore,
    Tenant,
    UnknownTenantError,
    generate_api_key,
    hash_api_key,
)
from auth.settings import JWTSettings, TenantLimits

SECRET = "a-shared-secret-of-at-least-32-bytes!"
ACME = Tenant("acme", TenantLimits(requests_per_minute=10), frozenset({"tts-1"}))


@pytest.fixture
async def store() -> MemoryAuthStore:
    store = MemoryAuthStore()
    await store.put_tenant(ACME)
    return store


@pytest.fixture
def authenticator(store: MemoryAuthStore) -> Authenticator:
    return Authenticator(store, JWTVerifier(JWTSettings(secret=SecretStr(SECRET))), open_mode=False)


def token(tenant: str) -> str:
    return jwt.encode({"tenant": tenant, "exp": int(time.time()) + 60}, SECRET)


async def refused(authenticator: Authenticator, header: str | None) -> str:
    with pytest.raises(InvalidCredentialsError) as caught:
        await authenticator.authenticate(header)
    return str(caught.value)


@pytest.mark.parametrize(
    "header",
    [None, "", "Bearer sk-tts-whatever", f"Bearer {generate_api_key()}", "Basic x"],
    ids=["none", "empty", "unknown-key", "well-formed-key", "basic"],  # not the generated key: the same in every run
)
async def test_open_mode_admits_everyone_as_anonymous(store: MemoryAuthStore, header: str | None) -> None:
    authenticator = Authenticator(store, None, open_mode=True)
    assert await authenticator.authenticate(header) == Principal(ANONYMOUS, "open")


async def test_valid_key_authenticates_its_tenant(store: MemoryAuthStore, authenticator: Authenticator) -> None:
    key, record = await store.create_key("acme")
    assert await authenticator.authenticate(f"Bearer {key}") == Principal(ACME, f"key:{record.id}")
    assert await authenticator.authenticate(f"bearer  {key} ") == Principal(ACME, f"key:{record.id}")


@pytest.mark.parametrize("header", [None, "", "   ", "Bearer", "Bearer    "])
async def test_missing_key_is_refused(authenticator: Authenticator, header: str | None) -> None:
    assert "You didn't provide an API key" in await refused(authenticator, header)


@pytest.mark.parametrize(("scheme", "secret"), [("Basic", "dXNlcjpwYXNz"), ("Token", "sk-tts-x"), ("", "sk-tts-y")])
async def test_other_schemes_are_refused(authenticator: Authenticator, scheme: str, secret: str) -> None:
    message = await refused(authenticator, f"{scheme} {secret}".strip())
    assert "Bearer" in message
    assert secret not in message


async def test_unknown_key_is_refused_showing_only_its_hint(authenticator: Authenticator) -> None:
    key = generate_api_key()
    message = await refused(authenticator, f"Bearer {key}")
    assert message == f"Incorrect API key provided: sk-tts-...{key[-4:]}."
    assert key not in message
    assert key[7:-4] not in message


async def test_revoked_key_is_refused(store: MemoryAuthStore, authenticator: Authenticator) -> None:
    key, record = await store.create_key("acme")
    await authenticator.authenticate(f"Bearer {key}")
    await store.revoke_key(record.id)
    message = await refused(authenticator, f"Bearer {key}")
    assert key not in message
    assert message.endswith(f"{key[-4:]}.")


async def test_key_of_a_deleted_tenant_is_refused(store: MemoryAuthStore, authenticator: Authenticator) -> None:
    key, _ = await store.create_key("acme")
    await store.delete_tenant("acme")
    assert key not in await refused(authenticator, f"Bearer {key}")


@pytest.mark.parametrize("credential", ["sk-tts-short", "sk-tts-" + "x" * 60, "sk-" + "a" * 48, "hunter2"])
async def test_malformed_key_is_refused_without_echo(authenticator: Authenticator, credential: str) -> None:
    message = await refused(authenticator, f"Bearer {credential}")
    assert credential not in message
    assert "Incorrect API key provided" in message


async def test_valid_jwt_authenticates_its_tenant(authenticator: Authenticator) -> None:
    assert await authenticator.authenticate(f"Bearer {token('acme')}") == Principal(ACME, "jwt")


async def test_jwt_for_unknown_tenant_is_forbidden(authenticator: Authenticator) -> None:
    with pytest.raises(UnknownTenantError, match="nobody"):
        await authenticator.authenticate(f"Bearer {token('nobody')}")


async def test_invalid_jwt_is_refused(authenticator: Authenticator) -> None:
    forged = jwt.encode({"tenant": "acme", "exp": int(time.time()) + 60}, "another-secret-of-at-least-32-bytes!!")
    message = await refused(authenticator, f"Bearer {forged}")
    assert forged not in message


async def test_jwt_without_verifier_is_refused(store: MemoryAuthStore) -> None:
    keys_only = Authenticator(store, None, open_mode=False)
    good = token("acme")
    assert good not in await refused(keys_only, f"Bearer {good}")


async def test_backend_failure_is_not_an_auth_failure() -> None:
    server = fakeredis.FakeServer()
    store = RedisAuthStore(fakeredis.FakeAsyncRedis(server=server), owns_client=True)
    await store.put_tenant(ACME)
    key, _ = await store.create_key("acme")
    server.connected = False
    with pytest.raises(AuthBackendError):
        await Authenticator(store, None, open_mode=False).authenticate(f"Bearer {key}")
    await store.close()


async def test_live_key_of_a_missing_tenant_is_refused() -> None:
    # delete_tenant revokes keys; this is the case it cannot cover: the tenant record alone is gone (restored backup,
    # hand edit), and the key must not authenticate as nobody.
    client = fakeredis.FakeAsyncRedis()
    store = RedisAuthStore(client, "p:", owns_client=True)
    await store.put_tenant(ACME)
    key, _ = await store.create_key("acme")
    await client.hdel("p:tenants", "acme")
    assert await store.find_key(hash_api_key(key)) is not None
    assert key not in await refused(Authenticator(store, None, open_mode=False), f"Bearer {key}")
    await store.close()
