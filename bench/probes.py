"""Instruments that watch a gateway from outside, each in a process of its own so that the benchmark's client does
not share their GIL: :class:`DelayingProxy`, a Redis proxy that holds each direction for a set time and counts the
round trips it carries, and :class:`HealthPoller`, which requests ``/healthz`` every few milliseconds to see how long
the gateway's event loop stalls. Times are ``time.monotonic()``, one clock for every process of the machine.

**The proxy** accepts a client (a gateway's Redis connection), connects to the real ``redis-server`` and forwards
each chunk read from either side after ``delay_s`` (0.5 ms each way: a 1 ms round trip), keeping the order of the
chunks and never holding one back for another (a pipelined reply is not delayed twice). Its event loop waits in
``select()``, whose timeout has microsecond precision: the default epoll selector rounds every wait up to a whole
millisecond, which would turn a 0.5 ms hold into 1 ms.

What it counts, per client connection: an **exchange** begins when the client sends bytes after the server last
answered on that connection (or for the first time), and ends with the last reply byte handed back to the client. A
Redis client never sends on a connection before the reply to what it sent there has come back (the connection is
its own until then), so one exchange is one round trip: a command, or a pipeline or ``MULTI``/``EXEC`` sent at
once. The commands in it are parsed from the client's bytes (RESP arrays) for their name and first key. A connection
that ever sends ``SUBSCRIBE`` (or ``PSUBSCRIBE``/``SSUBSCRIBE``) is a pub/sub subscriber, whose traffic is the server's
pushes and health-check pings rather than answers to requests: it is marked so that callers can leave it out.

Not simulated: the TCP handshake of a new connection (the kernel accepts it at once, with no delay) and bandwidth.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import multiprocessing
import re
import selectors
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.connection import Connection
    from multiprocessing.synchronize import Event

__all__ = ["CommandParser", "DelayingProxy", "Exchange", "HealthPoller", "Traffic"]

_SUBSCRIBE = frozenset({"SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE"})
_SCRIPTS = frozenset({"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"})
_LONG_HEX = re.compile(rb"[0-9a-f]{16,}")
_READ_SIZE = 1 << 16


@dataclass
class Exchange:
    """One round trip on one client connection: a request and its reply."""

    connection: int
    started: float
    """When the proxy read the first byte the client sent."""
    first_reply: float = 0.0
    """When the proxy read the first byte of the reply (0: none yet)."""
    ended: float = 0.0
    """When the proxy handed the client the last byte of the reply (0: none yet)."""
    commands: list[str] = field(default_factory=list)
    """Redis: ``NAME first-key`` of each command, long hex digits (hashes) as ``<hex>``. HTTP: the request line."""
    sent_bytes: int = 0
    received_bytes: int = 0


@dataclass(frozen=True)
class Traffic:
    """What :meth:`DelayingProxy.take` returns: the exchanges since the last call and how long chunks were held."""

    exchanges: list[Exchange]
    subscribers: frozenset[int]
    """Redis connections that subscribed to pub/sub channels (leave them out of what a request costs)."""
    http: frozenset[int]
    """Connections of the HTTP relays (:meth:`DelayingProxy.relay_http`): their exchanges are HTTP requests."""
    connections_opened: dict[int, float]
    """Connection number -> when it was accepted, for the connections accepted since the last call."""
    hold_ms: tuple[float, float, float]
    """p50, p99 and max of the time each chunk spent in the Redis proxy, read to written (the delay achieved)."""


class CommandParser:
    """Splits a client's byte stream into commands (RESP arrays of bulk strings, as every Redis client sends them)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[str]:
        """The commands ``data`` completes, each as ``NAME first-key``."""
        self._buffer += data
        commands = []
        while (command := self._next()) is not None:
            commands.append(command)
        return commands

    def _next(self) -> str | None:
        buffer = self._buffer
        end = buffer.find(b"\r\n")
        if end < 0:
            return None
        if buffer[:1] != b"*":  # an inline command (redis-cli, telnet): words on one line
            words = bytes(buffer[:end]).split()
            del buffer[: end + 2]
            return _label(words)
        arguments: list[bytes] = []
        position = end + 2
        for _ in range(int(buffer[1:end])):
            end = buffer.find(b"\r\n", position)
            if end < 0:
                return None
            start = end + 2
            stop = start + int(buffer[position + 1 : end])
            if len(buffer) < stop + 2:
                return None
            if len(arguments) < 4:
                arguments.append(bytes(buffer[start:stop]))
            position = stop + 2
        del buffer[:position]
        return _label(arguments)


def _label(arguments: list[bytes]) -> str:
    if not arguments:
        return ""
    name = arguments[0].decode(errors="replace").upper()
    # A script's first key follows its sha (or body) and the number of keys.
    key = arguments[3] if name in _SCRIPTS and len(arguments) > 3 else arguments[1] if len(arguments) > 1 else b""
    return f"{name} {_LONG_HEX.sub(b'<hex>', key).decode(errors='replace')}".strip()


class _Ledger:
    """Everything the proxy process has counted since the last ``take``."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []
        self.subscribers: set[int] = set()
        self.http: set[int] = set()
        self.opened: dict[int, float] = {}
        self.holds: list[float] = []
        self._next_number = 0

    def new_connection(self, *, http: bool) -> int:
        self._next_number += 1
        self.opened[self._next_number] = time.monotonic()
        if http:
            self.http.add(self._next_number)
        return self._next_number

    def take(self) -> Traffic:
        holds = sorted(self.holds) or [0.0]
        p99 = holds[min(len(holds) - 1, round(0.99 * (len(holds) - 1)))]
        traffic = Traffic(
            exchanges=self.exchanges,
            subscribers=frozenset(self.subscribers),
            http=frozenset(self.http),
            connections_opened=self.opened,
            hold_ms=(statistics.median(holds) * 1000, p99 * 1000, holds[-1] * 1000),
        )
        self.exchanges, self.opened, self.holds = [], {}, []
        return traffic


class _ClientConnection:
    """The exchanges of one client connection, Redis (commands parsed) or HTTP (request lines kept)."""

    def __init__(self, ledger: _Ledger, *, http: bool) -> None:
        self._ledger = ledger
        self._http = http
        self.number = ledger.new_connection(http=http)
        self._parser = CommandParser()
        self._current: Exchange | None = None

    def client_sent(self, data: bytes, read_at: float) -> None:
        if self._current is None or self._current.first_reply:
            self._current = Exchange(self.number, read_at)
            self._ledger.exchanges.append(self._current)
            if self._http:
                self._current.commands.append(data.split(b"\r\n", 1)[0].decode(errors="replace"))
        self._current.sent_bytes += len(data)
        if self._http:
            return
        commands = self._parser.feed(data)
        self._current.commands += commands
        if any(command.split(" ", 1)[0] in _SUBSCRIBE for command in commands):
            self._ledger.subscribers.add(self.number)

    def request_forwarded(self, size: int, read_at: float, written_at: float) -> None:
        self._hold(written_at - read_at)

    def reply_read(self, data: bytes, read_at: float) -> None:
        if self._current is not None and not self._current.first_reply:
            self._current.first_reply = read_at

    def reply_forwarded(self, size: int, read_at: float, written_at: float) -> None:
        self._hold(written_at - read_at)
        if self._current is not None:  # pushes to a subscriber may come before it sends anything new
            self._current.ended = written_at
            self._current.received_bytes += size

    def _hold(self, seconds: float) -> None:
        if not self._http:
            self._ledger.holds.append(seconds)


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    delay_s: float,
    on_read: Callable[[bytes, float], None],
    on_written: Callable[[int, float, float], None],
) -> None:
    """Forward ``reader`` to ``writer``, each chunk ``delay_s`` after it was read, in order."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def forward() -> None:
        while True:
            read_at, data = await queue.get()
            if not data:
                break
            wait = read_at + delay_s - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
            on_written(len(data), read_at, loop.time())
        with contextlib.suppress(OSError):
            writer.write_eof()

    forwarding = asyncio.create_task(forward())
    try:
        while data := await reader.read(_READ_SIZE):
            read_at = loop.time()
            on_read(data, read_at)
            queue.put_nowait((read_at, data))
    except OSError:
        pass
    finally:
        queue.put_nowait((0.0, b""))
        with contextlib.suppress(OSError):
            await forwarding


class _Relay:
    """One listening side of the proxy: a relay per accepted connection, every socket known so that stopping closes
    them. ``http``: the upstream is a gateway (no delay, request lines instead of commands)."""

    def __init__(self, ledger: _Ledger, upstream_port: int, delay_s: float, *, http: bool) -> None:
        self.ledger = ledger
        self._upstream_port = upstream_port
        self._delay_s = delay_s
        self._http = http
        self._writers: set[asyncio.StreamWriter] = set()
        self._relays: set[asyncio.Task[None]] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Relay one client connection (the ``asyncio.start_server`` callback)."""
        relay = asyncio.current_task()
        assert relay is not None
        self._relays.add(relay)
        connection = _ClientConnection(self.ledger, http=self._http)
        upstream_writer = None
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
            self._writers |= {writer, upstream_writer}
            await asyncio.gather(
                _pipe(reader, upstream_writer, self._delay_s, connection.client_sent, connection.request_forwarded),
                _pipe(upstream_reader, writer, self._delay_s, connection.reply_read, connection.reply_forwarded),
            )
        except OSError:
            pass
        finally:
            for each in (writer, upstream_writer):
                if each is not None:
                    each.close()
                    self._writers.discard(each)
            self._relays.discard(relay)

    async def close(self) -> None:
        """Close every socket, so that each relay ends as it would on a hang-up."""
        for writer in list(self._writers):
            writer.close()
        if self._relays:
            await asyncio.wait(self._relays, timeout=2)


async def _listen(relay: _Relay) -> asyncio.Server:
    return await asyncio.start_server(relay.serve, "127.0.0.1", 0)


async def _serve(upstream_port: int, delay_s: float, control: Connection) -> None:
    ledger = _Ledger()
    relays = [_Relay(ledger, upstream_port, delay_s, http=False)]
    servers = [await _listen(relays[0])]
    stopping = asyncio.Event()
    opening: set[asyncio.Task[None]] = set()

    async def relay_http(port: int) -> None:
        relays.append(_Relay(ledger, port, 0.0, http=True))
        servers.append(await _listen(relays[-1]))
        control.send(servers[-1].sockets[0].getsockname()[1])

    def answer() -> None:
        try:
            request = control.recv()
        except EOFError:  # the benchmark went away
            stopping.set()
            return
        if request == "take":
            control.send(ledger.take())
        elif isinstance(request, tuple) and request[0] == "relay":
            task = asyncio.create_task(relay_http(request[1]))
            opening.add(task)
            task.add_done_callback(opening.discard)
        else:
            stopping.set()

    asyncio.get_running_loop().add_reader(control.fileno(), answer)
    control.send(servers[0].sockets[0].getsockname()[1])
    await stopping.wait()
    for server in servers:
        server.close()
    for relay in relays:
        await relay.close()


def _run(upstream_port: int, delay_s: float, control: Connection) -> None:
    """The proxy process: an event loop on ``select()`` (sub-millisecond timers), serving until told to stop."""
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    try:
        loop.run_until_complete(_serve(upstream_port, delay_s, control))
    finally:
        loop.close()


class DelayingProxy:
    """The proxy process in front of ``redis-server`` on ``upstream_port``; :attr:`port` is where clients connect."""

    def __init__(self, upstream_port: int, delay_s: float) -> None:
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.port = 0
        context = multiprocessing.get_context("spawn")
        self._control, child_end = context.Pipe()
        self._process = context.Process(target=_run, args=(upstream_port, delay_s, child_end), daemon=True)

    def start(self) -> DelayingProxy:
        self._process.start()
        self.port = self._answer()
        return self

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def relay_http(self, port: int) -> int:
        """A port that relays HTTP to ``127.0.0.1:port`` without delay, its requests counted as exchanges too: the
        first byte of a response is then timed where the Redis traffic is, in one process on one clock, however late
        the client gets to read it."""
        self._control.send(("relay", port))
        relay_port: int = self._answer()
        return relay_port

    def take(self) -> Traffic:
        """The exchanges since the last call (or the start), and the holds achieved meanwhile."""
        self._control.send("take")
        traffic: Traffic = self._answer()
        return traffic

    def _answer(self) -> Any:
        if not self._control.poll(60):
            self.stop()
            raise TimeoutError("the proxy process did not answer within 60 s")
        return self._control.recv()

    def stop(self) -> None:
        if self._process.is_alive():
            with contextlib.suppress(OSError):
                self._control.send("stop")
            self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)

    def __enter__(self) -> DelayingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _poll(port: int, interval_s: float, stop: Event, out: Connection) -> None:
    """The poller process: ``GET /healthz`` every ``interval_s`` until ``stop``; sends "ready" after the first
    answer, then every (sent at, seconds taken)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    samples = []
    while not stop.is_set():
        started = time.monotonic()
        connection.request("GET", "/healthz")
        connection.getresponse().read()
        samples.append((started, time.monotonic() - started))
        if len(samples) == 1:
            out.send("ready")
        time.sleep(interval_s)
    connection.close()
    out.send(samples)


class HealthPoller:
    """Requests ``/healthz`` on ``127.0.0.1:port`` every ``interval_s`` (one keep-alive connection) from the moment
    it is started to :meth:`stop`, which returns every probe as (sent at, seconds until the answer)."""

    def __init__(self, port: int, interval_s: float) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._samples, child_end = context.Pipe(duplex=False)
        self._process = context.Process(target=_poll, args=(port, interval_s, self._stop, child_end), daemon=True)

    def start(self) -> HealthPoller:
        self._process.start()
        if not self._samples.poll(60) or self._samples.recv() != "ready":
            self._process.kill()
            raise TimeoutError("the /healthz poller got no answer within 60 s")
        return self

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        samples: list[tuple[float, float]] = self._samples.recv()
        self._process.join(10)
        return samples
