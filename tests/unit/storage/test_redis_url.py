"""Redis URLs: every scheme the gateway takes, those it refuses (at settings load), and passwords kept out of sight."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import pytest
import yaml
from pydantic import ValidationError

from gateway.settings import Settings
from harness.gateway_process import CONSOLE_SCRIPT
from storage.redis_url import InvalidRedisURLError, RedisURL, parse_redis_url, redact_redis_url

if TYPE_CHECKING:
    from pathlib import Path

SECRET = "s3cr3t-Pw"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://localhost", RedisURL("standalone", False, (("localhost", 6379),))),
        ("redis://:pw@redis.db:6380/2", RedisURL("standalone", False, (("redis.db", 6380),), password="pw", db=2)),
        ("redis://gw:p%40ss%2Fw@h/0", RedisURL("standalone", False, (("h", 6379),), username="gw", password="p@ss/w")),
        ("redis://gw@h?db=3", RedisURL("standalone", False, (("h", 6379),), username="gw", db=3)),
        ("redis://[::1]:7000", RedisURL("standalone", False, (("::1", 7000),))),
        (
            "rediss://h?ssl_ca_certs=/etc/ca.crt&ssl_check_hostname=false&ssl_cert_reqs=required",
            RedisURL(
                "standalone",
                True,
                (("h", 6379),),
                tls_options=(
                    ("ssl_ca_certs", "/etc/ca.crt"),
                    ("ssl_cert_reqs", "required"),
                    ("ssl_check_hostname", False),
                ),
            ),
        ),
        ("unix:///run/redis.sock", RedisURL("standalone", False, (), "/run/redis.sock")),
        ("unix://:pw@/run/redis.sock?db=1", RedisURL("standalone", False, (), "/run/redis.sock", password="pw", db=1)),
        (
            "redis+sentinel://:pw@s1:26380,s2,s3:1234/mymaster",
            RedisURL(
                "sentinel",
                False,
                (("s1", 26380), ("s2", 26379), ("s3", 1234)),
                password="pw",
                service="mymaster",
                sentinel_password="pw",  # as limits: the sentinels share the Redis credentials
            ),
        ),
        (
            "redis+sentinel://gw:pw@s1/mymaster/3?sentinel_password=spw&sentinel_username=sentinel",
            RedisURL(
                "sentinel",
                False,
                (("s1", 26379),),
                username="gw",
                password="pw",
                db=3,
                service="mymaster",
                sentinel_username="sentinel",
                sentinel_password="spw",
            ),
        ),
        (
            "rediss+sentinel://:pw@s1:1/m?sentinel_password=&ssl_ca_certs=/ca",
            RedisURL(
                "sentinel", True, (("s1", 1),), password="pw", service="m", tls_options=(("ssl_ca_certs", "/ca"),)
            ),
        ),
        (
            "redis+cluster://:pw@n1:7000,n2:7001",
            RedisURL("cluster", False, (("n1", 7000), ("n2", 7001)), password="pw"),
        ),
        ("rediss+cluster://n1,n2/", RedisURL("cluster", True, (("n1", 6379), ("n2", 6379)))),
        ("REDIS+CLUSTER://n1", RedisURL("cluster", False, (("n1", 6379),))),
    ],
)
def test_each_scheme_parses(url: str, expected: RedisURL) -> None:
    parsed = parse_redis_url(url)
    assert parsed == expected
    assert parsed.password is None or parsed.password not in repr(parsed)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://h", "must start with one of redis://"),
        ("redis:h", "must start with one of"),
        ("redis://", "a host is missing"),
        ("redis://h1,h2", "one host only"),
        ("redis://h/x", "the database must be a number"),
        ("redis://h/1?db=2", "given twice"),
        ("redis://h?db=1&db=2", "'db' is given twice"),
        ("redis://h:0", "port 0"),
        ("redis://h:70000", "Port out of range"),
        ("redis://h?socket_timeout=30", "unknown option 'socket_timeout'"),
        ("redis://h?ssl_ca_certs=/ca", "TLS option: use rediss://"),
        ("rediss://h?ssl_cert_reqs=sometimes", "ssl_cert_reqs must be one of none, optional, required"),
        ("rediss://h?ssl_check_hostname=perhaps", "ssl_check_hostname must be true or false"),
        ("rediss://h?ssl_ca_certs=", "ssl_ca_certs is empty"),
        ("unix://host/run/redis.sock", "the socket's path is missing"),
        (f"unix:///run/redis.sock?password={SECRET}", "credentials go before the host"),
        ("redis+sentinel://s1,s2", "service name is missing"),
        ("redis+sentinel://s1/m?sentinel_username=u", "sentinel_username needs sentinel_password"),
        (f"redis://h?sentinel_password={SECRET}", "options of redis+sentinel:// URLs"),
        ("redis+cluster://n1/1", "only database 0"),
        ("redis+cluster://n1?db=1", "only database 0"),
        ("redis+cluster://n1,,n2", "a host is missing: list them as h1:p1,h2:p2"),
        # A password that is not percent-encoded: never half-parsed, never shown.
        (f"redis://:{SECRET}#x@h", "percent-encode it (%23)"),
        (f"redis://:{SECRET}/x@h", "percent-encode '/', '?' and '@'"),
        (f"redis://:{SECRET}?x@h", "percent-encode '/', '?' and '@'"),
    ],
)
def test_a_url_the_gateway_cannot_use_is_refused_with_a_reason(url: str, problem: str) -> None:
    with pytest.raises(InvalidRedisURLError) as refused:
        parse_redis_url(url)
    message = str(refused.value)
    assert problem in message
    assert message.startswith(f"invalid Redis URL {redact_redis_url(url)}: ")
    assert SECRET not in message


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("redis://h:6379/0", "redis://h:6379/0"),
        (f"redis://:{SECRET}@h/0", "redis://:***@h/0"),
        (f"rediss://gw:{SECRET}@h/0", "rediss://gw:***@h/0"),
        (f"redis://{SECRET}@h", "redis://***@h"),  # a lone user part may be a password written without its colon
        (
            f"redis+sentinel://:{SECRET}@s1,s2/m?sentinel_password={SECRET}&db=1",
            "redis+sentinel://:***@s1,s2/m?sentinel_password=***&db=1",
        ),
        (f"unix:///s.sock?password={SECRET}", "unix:///s.sock?password=***"),
        (f"redis://:pa@ss{SECRET}@h", "redis://:***@h"),  # unencoded '@': everything up to the last one is hidden
        (f"redis://:{SECRET}/with/slashes@h", "redis://:***@h"),
        (f"redis://u/x:{SECRET}@h", "redis://***@h"),
    ],
)
def test_redaction_hides_every_password(url: str, redacted: str) -> None:
    assert redact_redis_url(url) == redacted


def test_settings_refuse_a_bad_url_without_showing_its_password() -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(redis_url=f"redis+sentinel://:{SECRET}@s1,s2")
    (error,) = refused.value.errors()
    assert error["loc"] == ("redis_url",)
    assert "service name is missing" in error["msg"] and SECRET not in error["msg"]
    assert Settings(redis_url="redis+cluster://n1:7000,n2:7000").redis_url == "redis+cluster://n1:7000,n2:7000"


def test_the_command_line_names_a_bad_url_without_its_password(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump({"redis_url": f"redis+cluster://:{SECRET}@n1/2"}))
    result = subprocess.run(
        [str(CONSOLE_SCRIPT), "keys", "create", "--tenant", "acme", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "invalid Redis URL redis+cluster://:***@n1/2: a Redis Cluster has only database 0" in result.stderr
    assert SECRET not in result.stdout + result.stderr
