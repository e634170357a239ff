"""The pure pieces of the hardening (issues #14 and #23): JSON depth, log redaction, the admin token's validation and
throttle, the connection cap's fit to the open-file limit, the one-line configuration error, client addresses and the
credential throttle."""

from __future__ import annotations

import dataclasses
import json
import logging
import resource
from typing import Any

import pytest
from litestar import Litestar, post
from litestar.params import JSONBody
from litestar.testing import TestClient
from pydantic import ValidationError
from websockets.frames import Frame, Opcode

from auth import Principal
from auth.errors import InvalidCredentialsError
from auth.settings import AuthSettings
from auth.tenants import ANONYMOUS
from gateway.cli.server import _one_line
from gateway.http.auth.credential_throttle import ADMIN_FAILURES_PER_MINUTE, AdminThrottle, CredentialThrottle
from gateway.http.client_address import ProxyTrust, address_key
from gateway.http.connection_limits import ConnectionLimits
from gateway.http.errors import EXCEPTION_HANDLERS, as_openai_error
from gateway.http.json_depth import json_depth_exceeds, json_depth_middleware
from gateway.http.refusals import AddressThrottledError
from gateway.native.protocol import parse_client_event
from gateway.observability.logs import JsonLogFormatter, WebSocketFrameRedactor
from gateway.sessions.redaction import QueryTokenRedactor
from gateway.sessions.stream_events import ProtocolError
from gateway.settings import ServerSettings, Settings


# ------------------------------------------------------------------------------------------------------ JSON depth
@pytest.mark.parametrize(
    ("document", "depth"),
    [
        ("{}", 1),
        ("[[]]", 2),
        ('{"a": [{"b": [1]}]}', 4),
        ('"[[[[[["', 0),
        ('{"a": "]]]]{{{{"}', 1),
        ('["\\"[[[[", [[1]]]', 3),
        ("[" * 40 + "]" * 40, 40),
        ("[" * 40, 40),
        ("", 0),
        ("[1, [2], [3], [4], [5]]", 2),
    ],
)
@pytest.mark.parametrize("as_bytes", [False, True])
def test_json_depth_counts_nesting_outside_strings(document: str, depth: int, as_bytes: bool) -> None:
    data: str | bytes = document.encode() if as_bytes else document
    assert not json_depth_exceeds(data, depth)
    if depth:
        assert json_depth_exceeds(data, depth - 1)


@post("/echo", status_code=200)
async def _echo(data: JSONBody[dict[str, Any]]) -> dict[str, Any]:
    return data


def _app(max_depth: int) -> Litestar:
    return Litestar([_echo], middleware=[json_depth_middleware(max_depth)], exception_handlers=EXCEPTION_HANDLERS)


def test_a_body_over_the_depth_gets_400_with_openai_body_before_it_is_parsed() -> None:
    with TestClient(_app(4)) as client:
        deep = client.post(
            "/echo", content='{"a": ' + "[" * 5000 + "]" * 5000 + "}", headers={"content-type": "application/json"}
        )
        assert deep.status_code == 400
        assert deep.json() == {
            "error": {
                "message": "The JSON body is nested deeper than 4 levels.",
                "type": "invalid_request_error",
                "param": None,
                "code": "json_too_deep",
            }
        }
        shallow = client.post("/echo", json={"a": [[["[[[[[[[[[[["]]]})
        assert shallow.status_code == 200 and shallow.json() == {"a": [[["[[[[[[[[[[["]]]}


def test_a_realtime_message_over_the_depth_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError) as raised:
        parse_client_event("[" * 1000 + "]" * 1000)
    assert raised.value.code == "json_too_deep" and raised.value.status_code == 400
    assert parse_client_event(json.dumps({"type": "input.append", "text": "[[[[" * 100})).type == "input.append"


# ------------------------------------------------------------------------------------------------------------ logs
def _redacted(msg: str, *args: Any) -> str:
    record = logging.LogRecord("uvicorn.error", logging.DEBUG, __file__, 1, msg, args, None)
    WebSocketFrameRedactor().filter(record)
    return json.loads(JsonLogFormatter().format(record))["message"]  # type: ignore[no-any-return]


def test_websocket_frames_are_logged_without_their_text() -> None:
    frame = Frame(Opcode.TEXT, b'{"type": "session.update", "token": "sk-secret", "text": "private words"}')
    line = _redacted("< %s", frame)
    assert line == f"< TEXT [{len(frame.data)} bytes]"
    assert _redacted("> %s", Frame(Opcode.BINARY, b"\x00" * 10)) == "> BINARY [10 bytes]"


@pytest.mark.parametrize("name", ["Authorization", "cookie", "Sec-WebSocket-Protocol", "xi-api-key"])
def test_handshake_credentials_are_logged_without_their_value(name: str) -> None:
    assert _redacted("< %s: %s", name, "Bearer sk-secret") == f"< {name}: [redacted]"


# Names as the server reads them: percent-decoded (``%74oken`` is ``token``), any case; and any name a client may
# guess for its key, which the gateway refuses only after uvicorn has logged the line.
@pytest.mark.parametrize(
    "name",
    [
        *("token", "authorization", "Authorization", "%74oken", "%61uthorization", "TOK%45N"),
        *("xi-api-key", "xi_api_key", "api_key", "key", "access_token", "%6Dodel_id_"),
    ],
)
def test_query_credentials_are_logged_without_their_value(name: str) -> None:
    record = logging.LogRecord(
        "uvicorn.error", logging.INFO, __file__, 1, '%s - "WebSocket %s" [accepted]', ("127.0.0.1:5", ""), None
    )
    query = f"model_id=m&{name}=sk-secret&output_format=pcm_16000&%6Dodel=tones"
    record.args = ("127.0.0.1:5", f"/v1/text-to-speech/nova/stream-input?{query}")
    QueryTokenRedactor().filter(record)
    assert "sk-secret" not in record.getMessage()
    assert f"?model_id=m&{name}=[redacted]&output_format=pcm_16000&%6Dodel=tones" in record.getMessage()


def test_other_lines_pass_unchanged() -> None:
    assert _redacted("< %s: %s", "user-agent", "curl/8") == "< user-agent: curl/8"
    assert _redacted("= connection is %s", "OPEN") == "= connection is OPEN"


# ----------------------------------------------------------------------------------------------------------- admin
@pytest.mark.parametrize("token", ["", "short-zq", "a" * 31])
def test_an_empty_or_short_admin_token_is_refused_in_one_line_without_its_value(token: str) -> None:
    with pytest.raises(ValidationError) as raised:
        Settings.model_validate({"auth": {"admin_token": token}})
    message = _one_line(raised.value)
    assert message.startswith("auth.admin_token: must be at least 32 characters")
    assert "\n" not in message
    if token:
        assert token not in message


def test_a_32_character_admin_token_is_accepted() -> None:
    assert AuthSettings.model_validate({"admin_token": "a" * 32}).admin_token is not None


def test_the_throttle_answers_429_after_the_failures_of_one_address_only(caplog: pytest.LogCaptureFixture) -> None:
    throttle = AdminThrottle()
    with caplog.at_level(logging.WARNING, "chattts_gateway.admin"):
        for _ in range(ADMIN_FAILURES_PER_MINUTE):
            throttle.check("10.0.0.1")
            throttle.failed("10.0.0.1", "wrong_token", "/admin/tenants")
    with pytest.raises(AddressThrottledError) as raised:
        throttle.check("10.0.0.1")
    answer = as_openai_error(raised.value)
    assert answer.status_code == 429
    assert 1 <= int(answer.headers["Retry-After"]) <= 60
    throttle.check("10.0.0.2")  # another address is not affected
    assert len(caplog.records) == ADMIN_FAILURES_PER_MINUTE
    assert all(record.levelno == logging.WARNING for record in caplog.records)
    assert "throttled" in caplog.records[-1].getMessage()


# ------------------------------------------------------------------------------------------------ connection cap
def test_the_connection_cap_fits_the_open_file_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    server = ServerSettings(max_connections=1000)
    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, 4096))
    assert ConnectionLimits.from_settings(server).max_connections == 192
    monkeypatch.setattr(resource, "getrlimit", lambda _: (65536, 65536))
    assert ConnectionLimits.from_settings(server).max_connections == 1000


def test_body_limits_come_from_the_settings_and_the_total_is_optional() -> None:
    limits = ConnectionLimits.from_settings(ServerSettings())
    assert (limits.body_min_rate_bytes_per_s, limits.body_rate_interval_s, limits.body_timeout_s) == (1024, 10.0, None)
    assert limits.body_min_interval_bytes == 10240
    legacy = ConnectionLimits.from_settings(ServerSettings(body_timeout_s=30))  # a config from before still loads
    assert legacy.body_timeout_s == 30


def test_every_connection_limit_is_the_configured_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    configured: dict[str, Any] = {
        "max_header_bytes": 2048,
        "max_headers": 9,
        "header_timeout_s": 3.5,
        "max_connections": 77,
        "body_min_rate_bytes_per_s": 5,
        "body_rate_interval_s": 2.5,
        "body_timeout_s": 45.0,
        "max_connections_per_address": 3,
    }
    monkeypatch.setattr(resource, "getrlimit", lambda _: (65536, 65536))
    limits = ConnectionLimits.from_settings(ServerSettings(**configured, trusted_proxies=["10.0.0.0/8"]))
    assert {field.name for field in dataclasses.fields(limits)} == {*configured, "proxies"}  # none left untested
    assert {name: getattr(limits, name) for name in configured} == configured
    assert limits.proxies.trusts("10.1.2.3")
    assert not limits.proxies.trusts("192.0.2.1")


# ----------------------------------------------------------------------------------------------- client addresses
@pytest.mark.parametrize(
    ("host", "key"),
    [
        ("203.0.113.7", "203.0.113.7"),
        ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),  # the same host's next address: the same key
        ("::ffff:203.0.113.7", "203.0.113.7"),
        ("testclient", "testclient"),
    ],
)
def test_a_client_counts_by_its_ipv4_address_or_its_ipv6_64(host: str, key: str) -> None:
    assert address_key(host) == key


@pytest.mark.parametrize(
    ("x_forwarded_for", "client"),
    [
        ([b"198.51.100.7"], "198.51.100.7"),
        ([b"198.51.100.8, 198.51.100.7"], "198.51.100.7"),  # the client forged the first entry; its proxy added .7
        ([b"198.51.100.8", b"198.51.100.7, 10.0.0.5"], "198.51.100.7"),  # two headers, and a trusted inner proxy
        ([b"198.51.100.7:4711"], "198.51.100.7"),
        ([b"[2001:db8::1]:4711"], "2001:db8::1"),
        ([b"10.0.0.4, 10.0.0.5"], None),  # every hop a trusted proxy: no client to count
        ([], None),
        ([b""], None),
    ],
)
def test_the_forwarded_client_is_the_last_untrusted_hop(x_forwarded_for: list[bytes], client: str | None) -> None:
    assert ProxyTrust(["10.0.0.0/8"]).forwarded_client(x_forwarded_for) == client


def test_trusted_proxies_must_be_addresses_or_networks() -> None:
    assert ServerSettings(trusted_proxies=["10.0.0.0/8", "127.0.0.1", "::1"]).trusted_proxies[0] == "10.0.0.0/8"
    with pytest.raises(ValidationError) as raised:
        Settings.model_validate({"server": {"trusted_proxies": ["*"]}})
    assert _one_line(raised.value) == "server.trusted_proxies: '*' is not an IP address or network"


# ------------------------------------------------------------------------------------------ credential throttle
class _Store:
    """An authenticate function over one valid key, counting its lookups (what the throttle must spare)."""

    def __init__(self, *valid: str) -> None:
        self.valid = {f"Bearer {key}" for key in valid}
        self.lookups = 0

    async def authenticate(self, authorization: str | None) -> Principal:
        if authorization is None:
            raise InvalidCredentialsError("no key")
        self.lookups += 1
        if authorization not in self.valid:
            raise InvalidCredentialsError("wrong key")
        return Principal(ANONYMOUS, "key:k")


async def _attempt(throttle: CredentialThrottle, store: _Store, client: str, authorization: str | None) -> int:
    try:
        await throttle.admit(client, authorization, store.authenticate)
    except InvalidCredentialsError:
        return 401
    except AddressThrottledError as error:
        throttled = as_openai_error(error)
    else:
        return 200
    assert throttled.code == "too_many_failed_authentications" and 1 <= int(throttled.headers["Retry-After"]) <= 60
    return throttled.status_code


async def test_past_the_bound_an_address_s_unproven_credentials_are_refused_without_a_lookup() -> None:
    store, throttle = _Store("sk-tenant", "sk-fresh"), CredentialThrottle(failures=5, window_s=60)
    assert await _attempt(throttle, store, "10.0.0.1", "Bearer sk-tenant") == 200  # proven (from any address)
    assert [await _attempt(throttle, store, "10.0.0.2", f"Bearer sk-guess-{n}") for n in range(5)] == [401] * 5
    lookups = store.lookups
    assert [await _attempt(throttle, store, "10.0.0.2", f"Bearer sk-guess-{n}") for n in range(50)] == [429] * 50
    assert store.lookups == lookups  # the flood cost no lookup
    assert await _attempt(throttle, store, "10.0.0.2", "Bearer sk-tenant") == 200  # the neighbour behind the NAT
    assert await _attempt(throttle, store, "10.0.0.2", "Bearer sk-fresh") == 429  # never proven here: it waits
    assert await _attempt(throttle, store, "10.0.0.3", "Bearer sk-fresh") == 200  # another address is not throttled
    assert await _attempt(throttle, store, "10.0.0.2", None) == 401  # no credential: nothing to throttle


async def test_requests_without_a_credential_are_not_counted() -> None:
    store, throttle = _Store("sk-tenant"), CredentialThrottle(failures=2, window_s=60)
    assert [await _attempt(throttle, store, "10.0.0.1", header) for header in [None, "", "  "] * 5] == [401] * 15
    assert await _attempt(throttle, store, "10.0.0.1", "Bearer sk-tenant") == 200


async def test_an_ipv6_client_cannot_dodge_the_throttle_with_fresh_addresses() -> None:
    store, throttle = _Store(), CredentialThrottle(failures=3, window_s=60)
    statuses = [await _attempt(throttle, store, f"2001:db8::{n:x}", f"Bearer sk-guess-{n}") for n in range(1, 9)]
    assert statuses == [401] * 3 + [429] * 5


async def test_the_proven_credentials_are_bounded() -> None:
    store = _Store(*(f"sk-{n}" for n in range(4)))
    throttle = CredentialThrottle(failures=1, window_s=60, proven_capacity=3)
    for n in range(4):  # sk-0 is the least recently used: forgotten
        assert await _attempt(throttle, store, "10.0.0.1", f"Bearer sk-{n}") == 200
    assert await _attempt(throttle, store, "10.0.0.2", "Bearer sk-guess") == 401
    assert [await _attempt(throttle, store, "10.0.0.2", f"Bearer sk-{n}") for n in range(4)] == [429, 200, 200, 200]


def test_a_request_without_an_admin_token_is_refused_but_not_counted() -> None:
    throttle = AdminThrottle()
    for _ in range(3 * ADMIN_FAILURES_PER_MINUTE):
        throttle.check("10.0.0.1")
        throttle.not_presented("10.0.0.1", "/admin/tenants")
    throttle.check("10.0.0.1")
