"""JWT verification: valid tokens name their tenant; every known attack is refused with a safe message."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from pydantic import SecretStr

from auth import InvalidCredentialsError, JWTVerifier
from auth.settings import JWTSettings

SECRET = "a-shared-secret-of-at-least-32-bytes!"


def _pem(private_key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return (
        private_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


@pytest.fixture(scope="module")
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def claims(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"tenant": "acme", "exp": int(time.time()) + 300}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(header: dict[str, Any], payload: dict[str, Any], key: bytes, digest: str = "sha256") -> str:
    """A token signed by hand, for what pyjwt itself refuses to produce (an HMAC keyed with a PEM)."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(payload).encode())}"
    signature = hmac.new(key, signing_input.encode(), getattr(hashlib, digest)).digest()
    return f"{signing_input}.{_b64(signature)}"


def refused(verifier: JWTVerifier, token: str, reason: str = "") -> InvalidCredentialsError:
    with pytest.raises(InvalidCredentialsError) as caught:
        verifier.verify(token)
    message = str(caught.value)
    assert not token or token not in message
    assert all(part not in message for part in token.split(".") if len(part) > 8)
    # pyjwt's own exception (which may quote the token) is not chained into logs either.
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None or caught.value.__suppress_context__
    assert reason in message
    return caught.value


@pytest.fixture
def hs256() -> JWTVerifier:
    return JWTVerifier(JWTSettings(algorithm="HS256", secret=SecretStr(SECRET)))


@pytest.fixture
def rs256(rsa_key: rsa.RSAPrivateKey) -> JWTVerifier:
    return JWTVerifier(JWTSettings(algorithm="RS256", public_key=_pem(rsa_key)))


# --- accepted ---------------------------------------------------------------------------------------------------------


def test_valid_hs256_token_names_its_tenant(hs256: JWTVerifier) -> None:
    assert hs256.verify(jwt.encode(claims(), SECRET, algorithm="HS256")) == "acme"


def test_valid_rs256_token_names_its_tenant(rs256: JWTVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    assert rs256.verify(jwt.encode(claims(tenant="globex"), rsa_key, algorithm="RS256")) == "globex"


def test_es256_works(ec_key: ec.EllipticCurvePrivateKey) -> None:
    verifier = JWTVerifier(JWTSettings(algorithm="ES256", public_key=_pem(ec_key)))
    assert verifier.verify(jwt.encode(claims(), ec_key, algorithm="ES256")) == "acme"
    other = ec.generate_private_key(ec.SECP256R1())
    refused(verifier, jwt.encode(claims(), other, algorithm="ES256"), "signature")


def test_custom_claim_audience_issuer_and_leeway() -> None:
    settings = JWTSettings(
        secret=SecretStr(SECRET), audience="tts", issuer="https://idp", tenant_claim="org", leeway_s=60
    )
    verifier = JWTVerifier(settings)
    token = jwt.encode(claims(tenant=None, org="acme", aud="tts", iss="https://idp", exp=int(time.time()) - 30),
                       SECRET)  # fmt: skip
    assert verifier.verify(token) == "acme"


# --- refused ----------------------------------------------------------------------------------------------------------


def test_alg_none_is_refused(hs256: JWTVerifier, rs256: JWTVerifier) -> None:
    token = jwt.encode(claims(), "", algorithm="none")
    refused(hs256, token, "algorithm")
    refused(rs256, token, "algorithm")
    refused(hs256, forge({"alg": "none", "typ": "JWT"}, claims(), b"").rpartition(".")[0] + ".")


def test_hs256_signed_with_the_public_key_is_refused_by_rs256(rs256: JWTVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    # The classic confusion attack: the public key is public, so an attacker can HMAC with it.
    pem = _pem(rsa_key).encode()
    refused(rs256, forge({"alg": "HS256", "typ": "JWT"}, claims(), pem), "algorithm")
    refused(rs256, forge({"alg": "RS256", "typ": "JWT"}, claims(), pem), "signature")


def test_rs256_token_is_refused_by_hs256(hs256: JWTVerifier, rsa_key: rsa.RSAPrivateKey) -> None:
    refused(hs256, jwt.encode(claims(), rsa_key, algorithm="RS256"), "algorithm")


def test_pem_as_hmac_secret_is_a_configuration_error(rsa_key: rsa.RSAPrivateKey) -> None:
    with pytest.raises(ValueError, match="does not suit HS256"):
        JWTVerifier(JWTSettings(algorithm="HS256", secret=SecretStr(_pem(rsa_key))))


def test_expired_token_is_refused(hs256: JWTVerifier) -> None:
    refused(hs256, jwt.encode(claims(exp=int(time.time()) - 5), SECRET), "expired")


def test_token_without_exp_is_refused(hs256: JWTVerifier) -> None:
    refused(hs256, jwt.encode(claims(exp=None), SECRET), "required claim")


def test_wrong_or_missing_audience_is_refused() -> None:
    verifier = JWTVerifier(JWTSettings(secret=SecretStr(SECRET), audience="tts"))
    refused(verifier, jwt.encode(claims(aud="billing"), SECRET), "audience")
    refused(verifier, jwt.encode(claims(), SECRET), "required claim")


def test_wrong_or_missing_issuer_is_refused() -> None:
    verifier = JWTVerifier(JWTSettings(secret=SecretStr(SECRET), issuer="https://idp"))
    refused(verifier, jwt.encode(claims(iss="https://evil"), SECRET), "issuer")
    refused(verifier, jwt.encode(claims(), SECRET), "required claim")


def test_tampered_payload_is_refused(hs256: JWTVerifier) -> None:
    header, _, signature = jwt.encode(claims(), SECRET).split(".")
    payload = _b64(json.dumps(claims(tenant="globex")).encode())
    refused(hs256, f"{header}.{payload}.{signature}", "signature")


def test_wrong_secret_is_refused(hs256: JWTVerifier) -> None:
    refused(hs256, jwt.encode(claims(), SECRET + "-but-another-one"), "signature")


def test_token_without_a_usable_tenant_claim_is_refused(hs256: JWTVerifier) -> None:
    for tenant in (None, "", 42, ["acme"]):
        refused(hs256, jwt.encode(claims(tenant=tenant), SECRET), "tenant")


@pytest.mark.parametrize("token", ["", "a.b.c", "...", "not-a-jwt", "eyJhbGciOiJIUzI1NiJ9.e30.", "a" * 5000])
def test_garbage_is_refused(hs256: JWTVerifier, token: str) -> None:
    refused(hs256, token)


# --- configuration errors -------------------------------------------------------------------------------------------


def test_weak_keys_are_configuration_errors() -> None:
    with pytest.raises(ValueError, match="too weak"):
        JWTVerifier(JWTSettings(secret=SecretStr("short")))
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(ValueError, match="too weak"):
        JWTVerifier(JWTSettings(algorithm="RS256", public_key=_pem(small)))


def test_private_or_mismatched_key_is_a_configuration_error(
    rsa_key: rsa.RSAPrivateKey, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    private_pem = rsa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    with pytest.raises(ValueError, match="private key"):
        JWTVerifier(JWTSettings(algorithm="RS256", public_key=private_pem))
    with pytest.raises(ValueError, match="does not suit ES256"):
        JWTVerifier(JWTSettings(algorithm="ES256", public_key=_pem(rsa_key)))
    with pytest.raises(ValueError, match="does not suit ES384"):
        JWTVerifier(JWTSettings(algorithm="ES384", public_key=_pem(ec_key)))
