"""The composition root's product: every long-lived object of one app (its :class:`~gateway.state.GatewayState`),
built from the settings in its lifespan.

One Redis client per process (``storage.connect_redis``) is handed to everything that stores: keys, limits, usage,
custom voices, consent recordings, pronunciation dictionaries and the audio cache (unless ``cache.redis_url`` gives
it a Redis of its own).
Without ``redis_url`` each of them keeps its state in this process's memory.
Handlers read the state through ``gateway.state.gateway_state``, or are given one service by name (``gateway/app.py``).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from auth import Authenticator, AuthStore, JWTVerifier, MemoryAuthStore, RedisAuthStore, seed_tenants
from auth.cached import CachedAuthStore
from auth.limits import HeldConnections, TenantRateLimiter
from auth.limits.sockets import RedisSocketSends
from auth.revocations import AnnouncingStore, LocalRevocationBus, RedisRevocationBus, RevocationBus
from auth.usage import MemoryUsageLedger, RedisUsageLedger, UsageLedger
from gateway.http.auth.credential_throttle import AdminThrottle, CredentialThrottle
from gateway.http.auth.service_token import ServiceTokenAuthenticator
from gateway.jobs.dispatch import JobDispatch, LocalDispatch, QueueDispatch
from gateway.jobs.runner import JobRunner
from gateway.jobs.service import SpeechJobs
from gateway.jobs.store import AudioFiles, JobStore, MemoryJobStore, RedisJobStore
from gateway.jobs.turns import TenantTurns
from gateway.legacy import move_legacy_layout
from gateway.sessions.registry import SessionRegistry
from gateway.speech.admission import AdmissionControl
from gateway.speech.cache import AudioCache
from gateway.speech.compile_process import CompileProcess
from gateway.speech.consents import ConsentStore, MemoryConsentStore, RedisConsentStore
from gateway.speech.dictionaries import DictionaryStore, MemoryDictionaryStore, RedisDictionaryStore
from gateway.speech.plan import Planner
from gateway.speech.pronunciation import PronunciationDictionaries
from gateway.speech.service import SpeechService
from gateway.speech.singleflight import SingleFlight
from gateway.speech.voice_aliases import built_in_aliases
from gateway.speech.voices import MemoryVoiceStore, RedisVoiceStore, VoiceStore
from gateway.state import GatewayState
from gateway.text.pls import RuleCaps
from gateway.uploads import DecoderProcesses, Uploads
from lifecycle import BackgroundTasks, naming
from storage import STORAGE_ERRORS, RedisClient, connect_redis, redact_redis_url
from storage.memory import EvictionPolicyCheck
from storage.probe import StorageProbe

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AsyncExitStack

    from gateway.observability.metrics import SpeechMetrics
    from gateway.settings import CacheSettings, Settings
    from gateway.speech.routing import ModelRouter
    from storage.pressure import WriteRefusals

__all__ = ["open_state"]

logger = naming.logger("services")

OPEN_MODE_WARNING = (
    "NO TENANTS ARE CONFIGURED: the gateway is OPEN — every caller is served without credentials as tenant "
    "'anonymous'. Configure auth.tenants (or auth.admin_token) before exposing it beyond localhost."
)


async def open_state(
    settings: Settings,
    router: ModelRouter,
    metrics: SpeechMetrics,
    stack: AsyncExitStack,
    *,
    decoders: DecoderProcesses | None = None,
) -> GatewayState:
    """Build every service, each registered on ``stack`` as it starts, so that closing the stack stops what was
    started whatever failed after it; tenants from the configuration file are written into the store. What a request
    may need (the throttles included) is built here, never on a first request.

    ``decoders``: upload decoder processes that someone else started and stops (the in-process tests share one set);
    by default the app starts its own from ``settings.uploads``."""
    uploads = Uploads(settings.uploads, decoders or _start_decoders(settings, stack))
    redis = await _redis(settings, stack)
    revocations: RevocationBus = RedisRevocationBus(redis) if redis is not None else LocalRevocationBus()
    stack.push_async_callback(revocations.close)
    store = _auth_store(settings, redis, revocations)
    stack.push_async_callback(store.close)
    sessions = SessionRegistry(RedisSocketSends(redis) if redis is not None else None)
    stack.push_async_callback(sessions.close)
    revocations.listen(sessions.revoked)
    revocations.after_gap(lambda: sessions.recheck_soon(store))  # announcements missed meanwhile: ask the store
    await revocations.start()
    if settings.auth.tenants:
        await seed_tenants(store, settings.auth.tenants)
    limiter = _limiter(settings, redis)
    stack.push_async_callback(limiter.close)
    usage = _usage_ledger(settings, redis)
    stack.push_async_callback(usage.close)
    cache = AudioCache(_cache_settings(settings), redis)
    stack.push_async_callback(cache.close)
    await cache.start()
    refusals = [cache.write_refusals, limiter.write_refusals, *_refusals_of(usage)]
    cache.give_way_to(*refusals[1:])  # a Redis full for the control plane costs the cache first
    metrics.write_refusals.watch(*refusals)
    metrics.cache_writes.watch(lambda: cache.writes_in_flight)
    voices: VoiceStore = RedisVoiceStore(redis) if redis is not None else MemoryVoiceStore()
    consents: ConsentStore = RedisConsentStore(redis) if redis is not None else MemoryConsentStore()
    compile_process = CompileProcess()
    stack.callback(compile_process.close)
    pronunciation = _pronunciation(settings, redis, compile_process)
    admission = AdmissionControl(limiter, usage, metrics)
    revocations.listen(admission.tenant_changed)
    speech = SpeechService(
        Planner(router, voices, pronunciation, voice_aliases=built_in_aliases(settings.voices.aliases)),
        admission,
        cache,
        SingleFlight(),
        usage,
        metrics,
        max_segment_chars=settings.speech.max_segment_chars,
        max_input_chars=settings.speech.max_input_chars,
        job_priority=settings.jobs.priority,
    )
    stack.push_async_callback(speech.background.close)
    jobs = _speech_jobs(settings, redis, speech, store, stack, engines_ready=_engines_ready(router))
    storage = StorageProbe(
        redis,
        required=settings.limits.fail_mode == "closed",
        policy=_eviction_policy_check(settings, redis),
        write_refusals=refusals,
    )
    await storage.state()  # reads the eviction policy now when Redis answers
    return GatewayState(
        settings=settings,
        router=router,
        redis=redis,
        auth_store=store,
        authenticator=_authenticator(settings, store),
        limiter=limiter,
        admission=admission,
        usage=usage,
        voices=voices,
        consents=consents,
        pronunciation=pronunciation,
        speech=speech,
        metrics=metrics,
        jobs=jobs,
        storage=storage,
        revocations=revocations,
        sessions=sessions,
        uploads=uploads,
        held=HeldConnections(settings.server.max_connections),
        credential_throttle=CredentialThrottle.from_settings(settings.server),
        admin_throttle=AdminThrottle(),
        awaiting_credentials=Counter(),
    )


def _pronunciation(
    settings: Settings, redis: RedisClient | None, compile_process: CompileProcess
) -> PronunciationDictionaries:
    caps = settings.pronunciation
    store: DictionaryStore = RedisDictionaryStore(redis) if redis is not None else MemoryDictionaryStore()
    return PronunciationDictionaries(
        store,
        max_per_tenant=caps.max_dictionaries_per_tenant,
        caps=RuleCaps(max_rules=caps.max_rules_per_dictionary),
        max_file_bytes=caps.max_file_bytes,
        compile_characters_per_minute=caps.compile_characters_per_minute,
        compile_process=compile_process,
    )


def _speech_jobs(
    settings: Settings,
    redis: RedisClient | None,
    speech: SpeechService,
    tenants: AuthStore,
    stack: AsyncExitStack,
    *,
    engines_ready: Callable[[], bool],
) -> SpeechJobs | None:
    """Speech jobs in Redis, queued for whichever replica runs them (once its engines are ready); without Redis,
    this process's own (not durable). Their dispatch stops before the speech service: the jobs it runs go back to the
    queue."""
    config = settings.jobs
    if not config.enabled or settings.server.profile == "engine":
        return None
    store = _job_store(settings, redis, stack)
    runner = JobRunner(
        store, speech, tenants, TenantTurns(config.concurrency), segment_attempts=config.segment_attempts
    )
    dispatch: JobDispatch
    if redis is not None:
        queued = QueueDispatch(redis, runner, config, engines_ready=engines_ready)
        queued.start()
        dispatch = queued
    else:
        dispatch = LocalDispatch(runner)
    stack.push_async_callback(dispatch.close)
    jobs = SpeechJobs(store, dispatch, speech, config)
    stack.push_async_callback(jobs.close)
    return jobs


def _engines_ready(router: ModelRouter) -> Callable[[], bool]:
    """Whether every model the gateway must serve has a ready engine (``router.requirements()``, as ``/readyz`` asks):
    what a replica waits for before it takes jobs from the queue."""

    def ready() -> bool:
        return all(
            any(router.pools[name].status().state == "ready" for name in engines)
            for engines in router.requirements().values()
        )

    return ready


def _job_store(settings: Settings, redis: RedisClient | None, stack: AsyncExitStack) -> JobStore:
    """The jobs in Redis (their audio too, or in ``jobs.directory``, swept of expired jobs by every replica), or in
    this process's memory."""
    config = settings.jobs
    if redis is None:
        return MemoryJobStore(config.ttl_s)
    if config.directory is None:
        return RedisJobStore(redis, config.ttl_s)
    files = AudioFiles(config.directory)
    store = RedisJobStore(redis, config.ttl_s, files=files)
    sweeping = BackgroundTasks("the jobs' audio files")
    sweeping.spawn(files.sweep_forever(store, min(config.ttl_s, 600)))
    stack.push_async_callback(sweeping.close)
    return store


def _start_decoders(settings: Settings, stack: AsyncExitStack) -> DecoderProcesses:
    """The app's own decoder processes, warm in the background before the first upload, stopped with ``stack``. An
    engine node starts none: it takes no uploads (``gateway/http/auth/security.py`` refuses them before any handler)."""
    decoders = DecoderProcesses(settings.uploads)
    if settings.server.profile != "engine":
        stack.callback(decoders.stop)
        decoders.start()
    return decoders


async def _redis(settings: Settings, stack: AsyncExitStack) -> RedisClient | None:
    """The process's Redis client (closed with the stack), in today's layout; ``None`` without ``redis_url``."""
    if settings.redis_url is None:
        return None
    logger.info("shared state in Redis at %s", redact_redis_url(settings.redis_url))
    redis = connect_redis(settings.redis_url, settings.redis_pool)
    stack.push_async_callback(redis.aclose)
    await _move_legacy_layout(redis, settings)
    return redis


def _limiter(settings: Settings, redis: RedisClient | None) -> TenantRateLimiter:
    limits = settings.limits
    return TenantRateLimiter(
        redis, fail_mode=limits.fail_mode, lease_ttl_s=limits.lease_ttl_s, stream_wait_s=limits.stream_wait_s
    )


def _usage_ledger(settings: Settings, redis: RedisClient | None) -> UsageLedger:
    retention_s = settings.auth.retired_usage_retention_s
    if redis is None:
        return MemoryUsageLedger(retired_retention_s=retention_s)
    return RedisUsageLedger(redis, retired_retention_s=retention_s)


def _refusals_of(usage: UsageLedger) -> list[WriteRefusals]:
    return [usage.write_refusals] if isinstance(usage, RedisUsageLedger) else []


def _authenticator(settings: Settings, store: AuthStore) -> Authenticator:
    """API keys and JWTs; an engine node's service token; or everyone, loudly, when nothing is configured."""
    auth = settings.auth
    engine_node = settings.server.profile == "engine"
    if engine_node and auth.service_token is not None:
        return ServiceTokenAuthenticator(store, auth.service_token.get_secret_value())
    open_mode = not engine_node and not auth.tenants and auth.admin_token is None
    if open_mode:
        logger.warning(OPEN_MODE_WARNING)
    jwt = JWTVerifier(auth.jwt) if auth.jwt is not None else None
    return Authenticator(store, jwt, open_mode=open_mode)


def _cache_settings(settings: Settings) -> CacheSettings:
    """An engine node caches nothing: the front gateway does, per tenant."""
    if settings.server.profile == "engine":
        return settings.cache.model_copy(update={"enabled": False})
    return settings.cache


def _eviction_policy_check(settings: Settings, redis: RedisClient | None) -> EvictionPolicyCheck | None:
    """The check of the shared Redis's ``maxmemory-policy`` (it holds the control plane, and the cache unless
    ``cache.redis_url`` gives it another)."""
    if redis is None:
        return None
    return EvictionPolicyCheck(redis, logger, cache_shares_it=settings.cache.redis_url is None)


async def _move_legacy_layout(redis: RedisClient, settings: Settings) -> None:
    try:
        await move_legacy_layout(redis, revoked_retention_s=settings.auth.revoked_key_retention_s)
    except STORAGE_ERRORS as exc:  # Redis out of reach at start: the next start moves it
        logger.warning("could not check Redis for the previous version's layout: %r", exc)


def _auth_store(settings: Settings, redis: RedisClient | None, revocations: RevocationBus) -> AuthStore:
    """The store, remembered by this replica and announcing every revocation and change it makes to every replica
    (``auth/cached.py``, ``auth/revocations.py``)."""
    retention_s = settings.auth.revoked_key_retention_s
    if redis is None:
        return AnnouncingStore(MemoryAuthStore(revoked_retention_s=retention_s), revocations)
    remembered = CachedAuthStore(
        RedisAuthStore(redis, revoked_retention_s=retention_s),
        listening=revocations.listening,
        fresh_s=settings.auth.lookup_cache_s,
        max_entries=settings.limits.outage_cache_entries,
        # Fail-open limits keep serving known callers through a Redis outage; fail-closed refuses them too.
        serve_in_outage=settings.limits.fail_mode == "open",
    )
    revocations.listen(remembered.revoked)
    revocations.after_gap(remembered.forget_freshness)
    return AnnouncingStore(remembered, revocations)
