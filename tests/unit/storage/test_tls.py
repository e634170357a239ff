"""TLS on each topology (``rediss://``, ``rediss+sentinel://``, ``rediss+cluster://``), against TLS-only servers whose
certificates a private CA signed: the URL's ``ssl_ca_certs`` is what makes the client trust them."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from storage import STORAGE_ERRORS, connect_redis
from tests.redis_server import RedisServer
from tests.redis_topologies import RedisClusterSetup, SentinelSetup

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.redis_server import TLSFiles


@pytest.fixture(scope="module", params=["redis", "sentinel", "cluster"])
def tls_url(request: pytest.FixtureRequest, tls_files: TLSFiles) -> Iterator[str]:
    setup: RedisServer | SentinelSetup | RedisClusterSetup
    if request.param == "redis":
        setup = RedisServer(password="pw", tls=tls_files)
        setup.start()
    elif request.param == "sentinel":
        setup = SentinelSetup(down_after_ms=30_000, tls=tls_files).start()
    else:
        setup = RedisClusterSetup(tls=tls_files).start()
    try:
        yield setup.url
    finally:
        setup.remove()


async def test_each_topology_speaks_tls_to_servers_of_a_private_ca(tls_url: str) -> None:
    assert tls_url.startswith("rediss") and "ssl_ca_certs=" in tls_url
    client = connect_redis(tls_url)
    try:
        script = client.register_script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        assert await script(keys=["tts:tls:{acme}"], args=[2]) == 2
        async with client.pubsub() as pubsub:
            await pubsub.subscribe("tts:auth:revocations")
            assert (await pubsub.get_message(timeout=1.0))["type"] == "subscribe"
    finally:
        await client.aclose()


async def test_without_the_ca_the_servers_are_not_trusted(tls_url: str) -> None:
    """Certificates are verified by default (the sentinels' failure to verify shows as "no master found")."""
    client = connect_redis(re.sub(r"[?&]ssl_ca_certs=[^&]*", "", tls_url))
    try:
        with pytest.raises(STORAGE_ERRORS):
            await client.set("tts:k", 1)
    finally:
        await client.aclose()
