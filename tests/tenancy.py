"""What the tenancy tests share: the admin token, a two-engine tenancy configuration, an admin client, a speech call.

A module, not a test module: test modules import from here, never from each other.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from harness.gateway_process import GatewayProcess

__all__ = ["ADMIN_TOKEN", "AUDIENCE", "JWT_SECRET", "Admin", "bearer", "speak", "tenancy_config"]

ADMIN_TOKEN = "admin-" + uuid.uuid4().hex
JWT_SECRET = "jwt-" + uuid.uuid4().hex
AUDIENCE = "tts-gateway-tests"

#: What :func:`speak` sends through: built once, for ``httpx.post`` builds a client and an SSL context on every call
#: (about 26 ms of CPU, against 1 ms a request here), and the tests speak in loops that wait for something. Keeps no
#: connection open between requests, as ``httpx.post`` did not.
_HTTP = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))


def tenancy_config(redis_url: str, **limits: Any) -> dict[str, Any]:
    """Replicas on ``redis_url`` with a seeded tenant ``acme``, JWTs, a fast and a real-time synthetic engine."""
    return {
        "redis_url": redis_url,
        "limits": limits or {"fail_mode": "open"},
        "auth": {
            "admin_token": ADMIN_TOKEN,
            "tenants": [{"name": "acme"}],
            "jwt": {"algorithm": "HS256", "secret": JWT_SECRET, "audience": AUDIENCE, "tenant_claim": "org"},
        },
        "engines": {
            "synthetic": {"kind": "synthetic", "workers": 2, "options": {"seconds_per_char": 0.02}},
            "slow": {"kind": "synthetic", "workers": 2, "options": {"rtf": 1.0, "seconds_per_char": 0.05}},
        },
        "aliases": {"tts-1": ["synthetic"]},
    }


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def speak(replica: GatewayProcess, key: str, text: str = "hello", **fields: Any) -> httpx.Response:
    """One PCM request to the synthetic engine (``model`` and the rest can be overridden)."""
    body = {"model": "synthetic", "input": text, "voice": "alloy", "response_format": "pcm", **fields}
    return _HTTP.post(f"{replica.base_url}/v1/audio/speech", json=body, headers=bearer(key), timeout=30)


class Admin:
    """The admin API of one replica, with ``ADMIN_TOKEN``."""

    def __init__(self, base_url: str) -> None:
        self.http = httpx.Client(base_url=base_url, headers=bearer(ADMIN_TOKEN), timeout=10)

    def tenant(self, name: str | None = None, /, models: list[str] | None = None, **limits: int) -> str:
        """Create a tenant (a new name unless given); its name."""
        name = name or f"t-{uuid.uuid4().hex[:10]}"
        response = self.http.post("/admin/tenants", json={"name": name, "limits": limits, "models": models})
        assert response.status_code == 201, response.text
        return name

    def key(self, tenant: str) -> dict[str, Any]:
        """A new key of the tenant: its record, with the key itself."""
        response = self.http.post(f"/admin/tenants/{tenant}/keys")
        assert response.status_code == 201, response.text
        return dict(response.json())

    def pages(self, path: str, limit: int) -> list[dict[str, Any]]:
        """Every record of a listing, following its cursor; each page within ``limit``."""
        records: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": limit}
        while True:
            page = self.http.get(path, params=params).json()
            assert page["object"] == "list" and len(page["data"]) <= limit
            if page["data"]:
                assert (page["first_id"], page["last_id"]) == (page["data"][0]["id"], page["data"][-1]["id"])
            records.extend(page["data"])
            if not page["has_more"]:
                return records
            params["after"] = page["last_id"]

    def revoke(self, key: dict[str, Any]) -> None:
        """Revoke a key by its record (as :meth:`key` returns it)."""
        assert self.http.delete(f"/admin/keys/{key['id']}").status_code == 200

    def delete_tenant(self, name: str) -> None:
        response = self.http.delete(f"/admin/tenants/{name}")
        assert response.status_code == 200, response.text

    def close(self) -> None:
        self.http.close()
