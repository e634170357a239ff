"""The multi-tenant services, built once from the settings: in memory by default, on Redis with ``redis_url``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from auth import (
    Authenticator,
    AuthStore,
    JWTVerifier,
    MemoryAuthStore,
    RedisAuthStore,
    seed_tenants,
)
from auth.limits import TenantRateLimiter
from auth.resilient import OutageTolerantStore
from auth.usage import MemoryUsageLedger, RedisUsageLedger, UsageLedger
from gateway.cache import AudioCache, SingleFlight
from gateway.custom_voices import MemoryVoiceStore, RedisVoiceStore, VoiceStore

if TYPE_CHECKING:
    from gateway.settings import Settings

__all__ = ["Tenancy", "open_tenancy"]

logger = logging.getLogger("tts_gateway.tenancy")

OPEN_MODE_WARNING = (
    "NO TENANTS ARE CONFIGURED: the gateway is OPEN — every caller is served without credentials as tenant "
    "'anonymous'. Configure auth.tenants (or auth.admin_token) before exposing it beyond localhost."
)


@dataclass
class Tenancy:
    """Who may call, how much, what they spoke, and the audio they may get again from the cache."""

    open_mode: bool
    store: AuthStore
    authenticator: Authenticator
    limiter: TenantRateLimiter
    usage: UsageLedger
    voices: VoiceStore
    cache: AudioCache
    flights: SingleFlight
    cache_enabled: bool
    cache_shared: bool
    limiter_fails_open: bool
    redis: Redis | None

    async def close(self) -> None:
        await self.limiter.close()
        await self.cache.close()
        await self.store.close()
        if self.redis is not None:
            await self.redis.aclose()


async def open_tenancy(settings: Settings) -> Tenancy:
    """Build every tenancy service; tenants from the configuration file are written into the store."""
    auth = settings.auth
    open_mode = not auth.tenants and auth.admin_token is None
    redis = _redis_client(settings.redis_url)
    store: AuthStore = MemoryAuthStore()
    if redis is not None:
        # Fail-open limits keep serving known callers through a Redis outage; fail-closed refuses them too.
        fail_open = settings.limits.fail_mode == "open"
        store = OutageTolerantStore(RedisAuthStore(redis)) if fail_open else RedisAuthStore(redis)
    if auth.tenants:
        await seed_tenants(store, auth.tenants)
    if open_mode:
        logger.warning(OPEN_MODE_WARNING)
    jwt = JWTVerifier(auth.jwt) if auth.jwt is not None else None
    return Tenancy(
        open_mode=open_mode,
        store=store,
        authenticator=Authenticator(store, jwt, open_mode=open_mode),
        limiter=TenantRateLimiter(settings.redis_url or "memory://", fail_mode=settings.limits.fail_mode,
                                  lease_ttl_s=settings.limits.lease_ttl_s,
                                  stream_wait_s=settings.limits.stream_wait_s),
        usage=RedisUsageLedger(redis) if redis is not None else MemoryUsageLedger(),
        voices=RedisVoiceStore(redis) if redis is not None else MemoryVoiceStore(),
        cache=AudioCache(settings.cache, settings.redis_url),
        flights=SingleFlight(),
        cache_enabled=settings.cache.enabled,
        cache_shared=settings.cache.shared_across_tenants,
        limiter_fails_open=settings.limits.fail_mode == "open",
        redis=redis,
    )


def _redis_client(url: str | None) -> Redis | None:
    if url is None:
        return None
    # Short timeouts and a single retry: an unreachable Redis must degrade requests quickly, never hang them
    # (redis-py's default retries with backoff for seconds).
    return Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0, health_check_interval=10,
                          retry=Retry(NoBackoff(), 1))
