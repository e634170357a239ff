"""Redis URLs: what each scheme means, checked once when the settings load, and how one is shown without its secrets.

The schemes are the ``limits`` library's, with a TLS variant of each (``rediss+``)::

    redis://[[user]:password@]host[:port][/db]                          one Redis (port 6379 by default)
    rediss://...                                                        the same over TLS
    unix://[[user]:password@]/path/to/redis.sock[?db=N]                 one Redis on a Unix socket
    redis+sentinel://[[user]:password@]h1[:p1],h2[:p2]/service[/db]     the master of ``service``, as the sentinels
                                                                        at h1, h2... name it (port 26379 by default)
    rediss+sentinel://...                                               TLS to the sentinels and to the master
    redis+cluster://[[user]:password@]h1[:p1],h2[:p2]                   a Redis Cluster, from these startup nodes
    rediss+cluster://...                                                the same over TLS

Query options, each at most once (anything else is refused, so a typo cannot go unnoticed):

- ``db=N``: the database, like the path (not for a cluster, which only has database 0).
- ``sentinel_password=...`` (and ``sentinel_username=...``), sentinel schemes only: the sentinels' own credentials.
  Without them the sentinels are sent the URL's user and password, as ``limits`` does and as sentinels set up with
  the same password as their Redis (Bitnami's chart, by default) expect; ``sentinel_password=`` with nothing after
  it: the sentinels need no password.
- TLS schemes only, with redis-py's names: ``ssl_ca_certs=/path/ca.crt`` (the CA that signed the servers'
  certificates, else the system's), ``ssl_certfile=`` and ``ssl_keyfile=`` (a client certificate, for servers that
  require one), ``ssl_cert_reqs=none|optional|required`` (default ``required``), ``ssl_check_hostname=true|false``
  (default ``true``).

User names and passwords are percent-decoded: a password with ``@ : / ? # %`` in it must be percent-encoded.
Timeouts are not options: every client gets the gateway's policy (``storage/redis.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, Literal
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["InvalidRedisURLError", "RedisURL", "Topology", "parse_redis_url", "redact_redis_url"]

Topology = Literal["standalone", "sentinel", "cluster"]

_SCHEMES: Final[dict[str, tuple[Topology, bool]]] = {
    "redis": ("standalone", False),
    "rediss": ("standalone", True),
    "unix": ("standalone", False),
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
}
_DEFAULT_PORT: Final = {"standalone": 6379, "sentinel": 26379, "cluster": 6379}
_TLS_OPTIONS: Final = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname")
_CERT_REQS: Final = ("none", "optional", "required")
_BOOLEANS: Final = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_REDACTED: Final = "***"


class InvalidRedisURLError(ValueError):
    """A Redis URL the gateway cannot use; its message names the URL without its secrets."""


@dataclass(frozen=True, slots=True)
class RedisURL:
    """A parsed, checked Redis URL: where Redis is, how it is deployed, and how to authenticate to it.

    Passwords stay out of ``repr``, so a parsed URL can be logged by accident without harm.
    """

    topology: Topology
    tls: bool
    addresses: tuple[tuple[str, int], ...]
    """``standalone``: the one server (empty for a Unix socket); ``sentinel``: the sentinels; ``cluster``: the
    startup nodes."""
    socket_path: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    db: int = 0
    service: str | None = None
    """``sentinel``: the name the sentinels monitor the master under."""
    sentinel_username: str | None = None
    sentinel_password: str | None = field(default=None, repr=False)
    tls_options: tuple[tuple[str, str | bool], ...] = ()
    """redis-py's ``ssl_*`` keyword arguments, as given in the query."""


class _URLProblemError(Exception):
    """What is wrong with a URL; :func:`parse_redis_url` adds the URL, redacted."""


def parse_redis_url(url: str) -> RedisURL:
    """The URL, checked.

    Raises:
        InvalidRedisURLError: an unknown scheme, a missing or malformed part, an unknown or misplaced option.
    """
    try:
        return _parse(url)
    except (_URLProblemError, ValueError) as exc:  # ValueError: urllib's own (a port out of range, a bad IPv6 address)
        raise InvalidRedisURLError(f"invalid Redis URL {redact_redis_url(url)}: {exc}") from None


def _parse(url: str) -> RedisURL:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES or not url[len(scheme) :].startswith("://"):
        raise _URLProblemError(f"it must start with one of {', '.join(f'{s}://' for s in _SCHEMES)}")
    if "#" in url:
        raise _URLProblemError("'#' starts a fragment, which a Redis URL has none of: percent-encode it (%23)")
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if "@" in url and not at:  # checked before the query, which would hold a piece of the password
        raise _URLProblemError("percent-encode '/', '?' and '@' in a password (and '@' elsewhere)")
    topology, tls = _SCHEMES[scheme]
    options = _query(parts.query)
    username, password = _userinfo(userinfo) if at else (None, None)
    tls_options = _tls_options(options, tls=tls)
    sentinel_username, sentinel_password = _sentinel_credentials(options, username, password, topology)
    db = options.pop("db", None)
    if {"password", "username"} & set(options):
        raise _URLProblemError("credentials go before the host: scheme://[user]:password@host, not in the query")
    if options:
        raise _URLProblemError(f"unknown option {sorted(options)[0]!r}")
    if scheme == "unix":
        if hosts or not parts.path:
            raise _URLProblemError("unix://[[user]:password@]/path/to/redis.sock: the socket's path is missing")
        path = unquote(parts.path)
        return RedisURL("standalone", False, (), path, username, password, db=_db(db, ""))
    addresses = _addresses(hosts, _DEFAULT_PORT[topology], several=topology != "standalone")
    path = unquote(parts.path).strip("/")
    service: str | None = None
    if topology == "sentinel":
        service, _, path = path.partition("/")
        if not service:
            raise _URLProblemError("the sentinels' service name is missing: redis+sentinel://h1:p1,h2:p2/service[/db]")
    if topology == "cluster" and (path or db is not None):
        raise _URLProblemError("a Redis Cluster has only database 0: no /db and no db= option")
    return RedisURL(
        topology,
        tls,
        addresses,
        username=username,
        password=password,
        db=_db(db, path),
        service=service,
        sentinel_username=sentinel_username,
        sentinel_password=sentinel_password,
        tls_options=tls_options,
    )


def _query(query: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name in options:
            raise _URLProblemError(f"option {name!r} is given twice")
        options[name] = value
    return options


def _userinfo(userinfo: str) -> tuple[str | None, str | None]:
    username, colon, password = userinfo.partition(":")
    return (unquote(username) or None), (unquote(password) if colon and password else None)


def _addresses(hosts: str, default_port: int, *, several: bool) -> tuple[tuple[str, int], ...]:
    locations = hosts.split(",")
    if not several and len(locations) > 1:
        raise _URLProblemError("one host only: redis+sentinel:// and redis+cluster:// take several")
    addresses = []
    for location in locations:
        parsed = urlsplit(f"//{location.strip()}")
        if not parsed.hostname:
            raise _URLProblemError("a host is missing" + (": list them as h1:p1,h2:p2" if several else ""))
        if parsed.port == 0:
            raise _URLProblemError("port 0")
        addresses.append((parsed.hostname, parsed.port or default_port))
    return tuple(addresses)


def _db(option: str | None, path: str) -> int:
    if option is not None and path:
        raise _URLProblemError("the database is given twice, in the path and as db=")
    given = option if option is not None else path
    if not given:
        return 0
    if not given.isdigit():
        raise _URLProblemError(f"the database must be a number, got {given!r}")
    return int(given)


def _tls_options(options: dict[str, str], *, tls: bool) -> tuple[tuple[str, str | bool], ...]:
    given = {name: options.pop(name) for name in _TLS_OPTIONS if name in options}
    if given and not tls:
        raise _URLProblemError(
            f"{sorted(given)[0]} is a TLS option: use rediss://, rediss+sentinel:// or rediss+cluster://"
        )
    parsed: dict[str, str | bool] = {}
    for name, value in given.items():
        if name == "ssl_check_hostname":
            if value.lower() not in _BOOLEANS:
                raise _URLProblemError(f"ssl_check_hostname must be true or false, got {value!r}")
            parsed[name] = _BOOLEANS[value.lower()]
        elif name == "ssl_cert_reqs" and value not in _CERT_REQS:
            raise _URLProblemError(f"ssl_cert_reqs must be one of {', '.join(_CERT_REQS)}, got {value!r}")
        elif not value:
            raise _URLProblemError(f"{name} is empty")
        else:
            parsed[name] = value
    return tuple(sorted(parsed.items()))


def _sentinel_credentials(
    options: dict[str, str], username: str | None, password: str | None, topology: Topology
) -> tuple[str | None, str | None]:
    sentinel_username = options.pop("sentinel_username", None)
    sentinel_password = options.pop("sentinel_password", None)
    if topology != "sentinel":
        if sentinel_username is not None or sentinel_password is not None:
            raise _URLProblemError("sentinel_username and sentinel_password are options of redis+sentinel:// URLs")
        return None, None
    if sentinel_password is None:
        if sentinel_username is not None:
            raise _URLProblemError("sentinel_username needs sentinel_password (empty for none)")
        return username, password  # as limits does: the sentinels share the Redis credentials
    return (sentinel_username or None), (sentinel_password or None)


_USERINFO = re.compile(r"^(?P<scheme>[^:/?#]+://)(?P<userinfo>.*)@(?P<rest>[^@]*)$", re.DOTALL)
_SECRET_OPTION = re.compile(r"(?P<name>(?:^|[?&])[^=&]*password=)[^&]*", re.IGNORECASE)


def redact_redis_url(url: str) -> str:
    """The URL with every password replaced by ``***`` (the user name stays), for logs and error messages.

    It works on malformed URLs too (an unencoded ``@``, ``/`` or ``#`` in a password): everything up to the last
    ``@`` after the scheme counts as user information, so it hides too much rather than too little.
    """
    match = _USERINFO.match(url)
    if match is None:
        redacted = url
    else:
        username, colon, _ = match["userinfo"].partition(":")
        shown = f"{username}:{_REDACTED}" if colon and not re.search(r"[/?#]", username) else _REDACTED
        redacted = f"{match['scheme']}{shown}@{match['rest']}"
    return _SECRET_OPTION.sub(lambda option: option["name"] + _REDACTED, redacted)
