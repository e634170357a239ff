"""Refused credentials per client address: past a bound, an address's unproven credentials are not even looked up.

Every API key a caller presents costs a store lookup (a Redis round trip with ``redis_url``), and a key of the right
shape is looked up whether it exists or not. So a stranger sending random keys as fast as it can costs the store as
much as a busy tenant, and guesses at full speed. :class:`CredentialThrottle` counts, per client address, the
credentials refused there (``server.max_auth_failures_per_address`` within ``server.auth_failure_window_s``). Past
that, a request from the address gets 429 with ``Retry-After`` *before* its credential is looked up, unless that
credential has authenticated on this replica lately: the tenant behind the same address (a shared NAT, an office) is
not locked out by its neighbour, and a guessed key cannot be a proven one (keys carry 256 random bits). What is
remembered of a proven credential is a keyed hash, in a bounded memory (the least recently used go first).

Requests without a credential are not counted: their 401 costs nothing, and a client that forgot its key should hear
so, not 429. The address is the ASGI scope's client: the peer's, or the one a trusted proxy forwarded for
(``server.trusted_proxies``, applied by uvicorn), counted under :func:`~gateway.http.client_address.address_key`.

:class:`AdminThrottle` does the same for the admin token (``require_admin``, ``gateway/http/auth/security.py``). The
app's one of each is built with its state (``gateway/state.py``), before the first request.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from auth.errors import InvalidCredentialsError, UnknownTenantError
from gateway.http.client_address import address_key
from gateway.http.errors import as_openai_error
from gateway.http.refusals import AddressThrottledError
from gateway.observability.refusals import counted
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from auth import Principal
    from gateway.settings import ServerSettings

__all__ = ["ADMIN_FAILURES_PER_MINUTE", "AdminThrottle", "CredentialThrottle", "FailureWindow"]

logger = naming.logger("auth")
admin_logger = naming.logger("admin")

#: Credentials remembered as proven: 10,000 tenants' keys in about 1.5 MB.
PROVEN_CREDENTIALS = 10_000


class FailureWindow:
    """Failures per key in a moving window, in this replica's memory (``limits``' moving window)."""

    def __init__(self, failures: int, window_s: int) -> None:
        self.failures = failures
        self._item = RateLimitItemPerSecond(failures, window_s)
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    def exceeded(self, key: str) -> bool:
        """Whether ``key`` has had ``failures`` failures within the window."""
        return not self._limiter.test(self._item, key)

    def count(self, key: str) -> bool:
        """Count a failure of ``key``; whether that one reached the bound."""
        self._limiter.hit(self._item, key)
        return self.exceeded(key)

    def retry_after_s(self, key: str) -> int:
        """Whole seconds until the oldest failure of ``key`` leaves the window."""
        reset_time = self._limiter.get_window_stats(self._item, key).reset_time
        return max(1, math.ceil(reset_time - time.time()))


class CredentialThrottle:
    """Refused credentials per client address, and the credentials proven lately (see the module docstring)."""

    def __init__(self, failures: int, window_s: int, proven_capacity: int = PROVEN_CREDENTIALS) -> None:
        self._failures = FailureWindow(failures, window_s)
        self._proven: OrderedDict[bytes, None] = OrderedDict()
        self._proven_capacity = proven_capacity
        self._hash_key = secrets.token_bytes(16)  # what is remembered is worthless outside this process

    @classmethod
    def from_settings(cls, server: ServerSettings) -> CredentialThrottle:
        return cls(server.max_auth_failures_per_address, server.auth_failure_window_s)

    async def authenticate(
        self,
        client: str | None,
        authorization: str | None,
        authenticate: Callable[[str | None], Awaitable[Principal]],
    ) -> Principal:
        """As :meth:`admit`, with a throttled address's refusal in the error object the socket sessions still catch
        (``gateway/sessions/serving.py``), until they catch :class:`AddressThrottledError` themselves.

        Raises:
            OpenAIError: 429 with ``Retry-After``: the address is throttled and the credential was not looked up.
            InvalidCredentialsError, UnknownTenantError: refused (and counted against the address).
        """
        try:
            return await self.admit(client, authorization, authenticate)
        except AddressThrottledError as throttled:
            raise as_openai_error(throttled) from None

    async def admit(
        self,
        client: str | None,
        authorization: str | None,
        authenticate: Callable[[str | None], Awaitable[Principal]],
    ) -> Principal:
        """``authenticate(authorization)``, unless ``client``'s address is throttled and the credential unproven.

        Raises:
            AddressThrottledError: the address is throttled and the credential was not looked up (429 with
                ``Retry-After``).
            InvalidCredentialsError, UnknownTenantError: refused (and counted against the address).
        """
        credential = _presented(authorization)
        if credential is None:  # guesses nothing: neither throttled nor counted (a realtime socket may send it later)
            return await authenticate(authorization)
        key = address_key(client or "unknown")
        proof = self._proof(credential)
        if proof not in self._proven and self._failures.exceeded(key):
            raise counted("credentials", self._throttled(key))
        try:
            principal = await authenticate(authorization)
        except (InvalidCredentialsError, UnknownTenantError) as exc:
            counted("credentials", exc)
            self._count_failure(key)
            raise
        self._remember(proof)
        return principal

    def _count_failure(self, key: str) -> None:
        if self._failures.count(key):
            logger.warning(
                "%d credentials refused from %s: its unproven credentials get 429 for %d s "
                "(server.max_auth_failures_per_address)",
                self._failures.failures,
                key,
                self._failures.retry_after_s(key),
                extra={"record": {"client": key, "throttled": True}},
            )

    def _proof(self, credential: str) -> bytes:
        return hashlib.blake2b(credential.encode(), key=self._hash_key, digest_size=16).digest()

    def _remember(self, proof: bytes) -> None:
        self._proven[proof] = None
        self._proven.move_to_end(proof)
        if len(self._proven) > self._proven_capacity:
            self._proven.popitem(last=False)

    def _throttled(self, key: str) -> AddressThrottledError:
        retry_after_s = self._failures.retry_after_s(key)
        return AddressThrottledError(
            f"Too many refused credentials from your address; retry after {retry_after_s} s.",
            retry_after_s=retry_after_s,
            kind="too_many_failed_authentications",
        )


def _presented(authorization: str | None) -> str | None:
    """The credential in an ``Authorization`` value (after its scheme), or ``None`` when none was presented."""
    value = (authorization or "").strip()
    if not value:
        return None
    scheme, _, credential = value.partition(" ")
    return credential.strip() or scheme


#: Failed admin authentications a client address may make in a moving minute before it is throttled.
ADMIN_FAILURES_PER_MINUTE = 10


class AdminThrottle:
    """Failed admin authentications per client address, in this replica's memory (a moving window from ``limits``).

    Per replica: an attacker spread over N replicas gets N times the attempts, still far too few for a 32-character
    token. Behind a proxy every client shares the proxy's address unless it is listed in ``server.trusted_proxies``.
    An IPv6 client counts by its /64 (:func:`~gateway.http.client_address.address_key`).
    """

    def __init__(self) -> None:
        self._failures = FailureWindow(ADMIN_FAILURES_PER_MINUTE, 60)

    def check(self, client: str) -> None:
        """Raise 429 with ``Retry-After`` while ``client`` is throttled."""
        if self._failures.exceeded(address_key(client)):
            retry_after_s = self._failures.retry_after_s(address_key(client))
            raise counted(
                "admin",
                AddressThrottledError(
                    f"Too many failed admin authentications; retry after {retry_after_s} s.",
                    retry_after_s=retry_after_s,
                    kind="rate_limit_exceeded",
                ),
            )

    def failed(self, client: str, reason: str, path: str) -> None:
        """Count a failed attempt and log it as a warning (the presented token never)."""
        key = address_key(client)
        throttled = self._failures.count(key)
        admin_logger.warning(
            "failed admin authentication (%s) from %s%s",
            reason,
            client,
            f"; throttled for {self._failures.retry_after_s(key)} s" if throttled else "",
            extra={"record": {"client": client, "reason": reason, "path": path, "throttled": throttled}},
        )

    def not_presented(self, client: str, path: str) -> None:
        """Log a request without a token as a warning, without counting it (it guesses nothing)."""
        admin_logger.warning(
            "admin request without a token from %s",
            client,
            extra={"record": {"client": client, "reason": "missing", "path": path, "throttled": False}},
        )
