"""JSON Web Tokens for business callers: one pinned algorithm, one key, the tenant in a claim."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from auth.errors import InvalidCredentialsError

if TYPE_CHECKING:
    from jwt.types import Options

    from auth.settings import JWTSettings

__all__ = ["JWTVerifier"]

# pyjwt's own messages may quote parts of the token; callers only ever see these.
_REASONS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "the token has expired"),
    (jwt.ImmatureSignatureError, "the token is not valid yet"),
    (jwt.InvalidAudienceError, "the token is for another audience"),
    (jwt.InvalidIssuerError, "the token is from another issuer"),
    (jwt.MissingRequiredClaimError, "the token lacks a required claim"),
    (jwt.InvalidSignatureError, "the token signature does not verify"),
    (jwt.InvalidAlgorithmError, "the token algorithm is not accepted"),
)


def _reason(exc: Exception) -> str:
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            return reason
    return "the token is malformed"


class JWTVerifier:
    """Verifies bearer JWTs against the configured algorithm and key and names their tenant."""

    def __init__(self, settings: JWTSettings) -> None:
        """Load and check the key once.

        Raises:
            ValueError: The key does not suit the algorithm (a PEM as an HMAC secret, an RSA key for ES256, a private
                key) or is shorter than RFC 7518 / NIST recommend (HMAC secret under the digest size, RSA under 2048
                bits): a configuration error, better at start-up than on every request.
        """
        self._settings = settings
        self._algorithm = settings.algorithm
        self._key = _prepare_key(settings)
        require = ["exp"] + ["aud"] * (settings.audience is not None) + ["iss"] * (settings.issuer is not None)
        self._options: Options = {"require": require}

    def verify(self, token: str) -> str:
        """The tenant name a valid token carries in ``settings.tenant_claim``.

        Raises:
            InvalidCredentialsError: Bad signature, other algorithm, expired, missing ``exp``, wrong audience or
                issuer, malformed, or no tenant claim. The message never contains the token.
        """
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=[self._algorithm],
                options=self._options,
                audience=self._settings.audience,
                issuer=self._settings.issuer,
                leeway=self._settings.leeway_s,
            )
        except (jwt.PyJWTError, ValueError) as exc:
            raise InvalidCredentialsError(f"Invalid bearer token: {_reason(exc)}.") from None
        tenant = claims.get(self._settings.tenant_claim)
        if not isinstance(tenant, str) or not tenant:
            raise InvalidCredentialsError(f"Invalid bearer token: no {self._settings.tenant_claim!r} claim.")
        return tenant


def _prepare_key(settings: JWTSettings) -> Any:
    raw = settings.secret.get_secret_value() if settings.secret is not None else settings.public_key
    algorithm = jwt.get_algorithm_by_name(settings.algorithm)
    try:
        key = algorithm.prepare_key(raw)
    except (jwt.InvalidKeyError, ValueError, TypeError) as exc:
        raise ValueError(f"the JWT key does not suit {settings.algorithm}: {type(exc).__name__}") from None
    if isinstance(key, RSAPrivateKey | EllipticCurvePrivateKey):
        raise ValueError("jwt.public_key holds a private key: configure the public key only")
    weakness = algorithm.check_key_length(key)
    if weakness:
        raise ValueError(f"the JWT key is too weak: {weakness}")
    return key
