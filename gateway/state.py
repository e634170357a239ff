"""The application's state: one typed object per app, built in its lifespan, read through :func:`gateway_state`.

Litestar's ``app.state`` is a bag of string keys. The gateway puts one thing in it, once: the :class:`GatewayState` that
the lifespan builds (``gateway/services.py``), under a key known to this module only (:func:`installed`). Handlers,
guards and middleware read it through :func:`gateway_state`, or are given one service by name
(``gateway/http/auth/dependencies.py``); none reads ``app.state`` itself, and nothing is added to it on a first
request: what a request needs exists before the first one comes, and the object is frozen
(``tests/unit/gateway/test_app_state.py`` holds both).

Below every route, the HTTP edge and the realtime endpoint; it imports what it holds for typing only.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections import Counter
    from collections.abc import Iterator

    from litestar import Litestar

    from auth import Authenticator, AuthStore
    from auth.limits import HeldConnections, TenantRateLimiter
    from auth.revocations import RevocationBus
    from auth.usage import UsageLedger
    from gateway.http.auth.credential_throttle import AdminThrottle, CredentialThrottle
    from gateway.jobs.service import SpeechJobs
    from gateway.observability.metrics import SpeechMetrics
    from gateway.sessions.registry import SessionRegistry
    from gateway.settings import Settings
    from gateway.speech.admission import AdmissionControl
    from gateway.speech.consents import ConsentStore
    from gateway.speech.pronunciation import PronunciationDictionaries
    from gateway.speech.routing import ModelRouter
    from gateway.speech.service import SpeechService
    from gateway.speech.voices import VoiceStore
    from gateway.uploads import Uploads
    from storage import RedisClient
    from storage.probe import StorageProbe

__all__ = ["GatewayState", "gateway_state", "installed"]

_KEY = "gateway"


@dataclass(frozen=True, slots=True, kw_only=True)
class GatewayState:
    """Every long-lived object of one app: its settings, engines, stores, limits and throttles."""

    settings: Settings
    router: ModelRouter
    """Model names and aliases to engine pools."""
    redis: RedisClient | None
    """The process's one Redis client; ``None`` without ``redis_url`` (every store in this process's memory)."""
    auth_store: AuthStore
    authenticator: Authenticator
    """API keys and JWTs; on an engine node, the service token (``gateway/http/auth/service_token.py``)."""
    limiter: TenantRateLimiter
    admission: AdmissionControl
    """The tenants' limits, budgets and leases with every refusal counted: what admits a request the speech operation
    does not carry (an upload, a job), reads a tenant's standing, or records a refusal of a cap checked elsewhere."""
    usage: UsageLedger
    voices: VoiceStore
    consents: ConsentStore
    pronunciation: PronunciationDictionaries
    """Tenants' pronunciation dictionaries (their store, caps and compiled lexicons)."""
    speech: SpeechService
    metrics: SpeechMetrics
    """The app's metrics (``gateway/observability/metrics.py``)."""
    jobs: SpeechJobs | None
    """Speech jobs (``gateway/jobs/``); ``None`` where they are off (``jobs.enabled``, an engine node)."""
    storage: StorageProbe
    """Whether the shared Redis answers, for ``/readyz``."""
    revocations: RevocationBus
    sessions: SessionRegistry
    """Open realtime sessions: ended when the revocation bus announces their key or tenant gone."""
    uploads: Uploads
    """Consent recordings and voice samples: their admission and their decoding in decoder processes."""
    held: HeldConnections
    """What each tenant holds of this replica's connections (sessions open, bodies arriving), and its fair share of
    them when the replica is crowded (``gateway/http/auth/early_auth.py``, ``gateway/realtime/route.py``)."""
    credential_throttle: CredentialThrottle
    """Refused API credentials per client address (HTTP and realtime alike)."""
    admin_throttle: AdminThrottle
    """Refused admin tokens per client address."""
    awaiting_credentials: Counter[str]
    """Realtime sockets waiting for the credentials of their first message, per client address."""


def gateway_state(app: Litestar) -> GatewayState:
    """The state of ``app``, built by its lifespan.

    Raises:
        LookupError: outside the lifespan (before it started, or once it has ended).
    """
    state = app.state.get(_KEY)
    if not isinstance(state, GatewayState):
        raise LookupError("the gateway's state exists only while its lifespan runs")
    return state


@contextmanager
def installed(app: Litestar, state: GatewayState) -> Iterator[GatewayState]:
    """Keep ``state`` on ``app`` for as long as the block runs (the lifespan, after everything in it started)."""
    app.state[_KEY] = state
    try:
        yield state
    finally:
        del app.state[_KEY]
