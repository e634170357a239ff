"""Fuzzing both upload routes of one real gateway with mutated recordings: never a 5xx, never a dropped connection,
and the server still the same process, answering, its memory flat.

The seeds are a valid recording in every container a caller may send (``harness.recordings.CONTAINERS``), ordinary
6- and 8-channel ones, and every hostile shape of ``harness.hostile_uploads``; Hypothesis mutates each with byte
flips, insertions, deletions, truncations and rewrites of the header fields that say how to decode it (sample rate,
channels, sample size: with random integers). An accepted upload is deleted at once, so that a long run measures the
decoding, not a growing store.

The suite's run is short and repeatable (``FUZZ_UPLOADS_EXAMPLES`` examples, 500 by default: seconds; derandomized);
``make fuzz-uploads`` runs thousands with a random seed it prints (``FUZZ_UPLOADS_SEED`` replays one). Examples are
not shrunk: once the server is down every later one fails too, so the first failure is the one that says what.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, note, seed, settings
from hypothesis import strategies as st

from auth.keys import generate_api_key
from harness.gateway_process import GatewayProcess
from harness.hostile_uploads import (
    HOSTILE_UPLOADS,
    UPLOAD_ROUTES,
    ServerFootprint,
    UploadClient,
    UploadRoute,
    multichannel_recording,
    upload_gateway_config,
)
from harness.recordings import CONTAINERS, recording, tone

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from hypothesis.vendor.pretty import RepresentationPrinter

EXAMPLES = int(os.environ.get("FUZZ_UPLOADS_EXAMPLES", "500"))
SEED = os.environ.get("FUZZ_UPLOADS_SEED")  # unset: derandomized, the same examples on every run
KEY = generate_api_key()
ROUTES: list[UploadRoute] = sorted(UPLOAD_ROUTES)
GROWTH_LIMIT_BYTES = 100 * 1000 * 1000
SEED_SECONDS = 1.5  # long enough to be accepted (at least 1 s), short enough to decode in milliseconds
MAX_CHUNK = 64
# Where the fields that say how to decode a file lie: (a marker, the field's offset from it, its width in bytes).
HEADER_FIELDS: tuple[tuple[bytes, int, int], ...] = (
    (b"fmt ", 10, 2),  # WAV: channels, sample rate, block align, bits per sample
    (b"fmt ", 12, 4),
    (b"fmt ", 20, 2),
    (b"fmt ", 22, 2),
    (b"fLaC", 8, 2),  # FLAC STREAMINFO: smallest block; then rate (20 bits), channels (3), bits (5)
    (b"fLaC", 18, 4),
    (b"\xff\xf8", 2, 2),  # a FLAC frame header: its block size and rate codes, channels and sample size
    (b"OpusHead", 9, 1),  # Ogg Opus: channels, input rate, mapping family
    (b"OpusHead", 12, 4),
    (b"OpusHead", 18, 1),
    (b"\x01vorbis", 11, 1),  # Ogg Vorbis: channels, rate
    (b"\x01vorbis", 12, 4),
    (b"mp4a", 20, 2),  # MP4 sample entry: channels, sample rate (16.16); the media timescale
    (b"mp4a", 28, 4),
    (b"mdhd", 16, 4),
    (b"\x9f\x81", 2, 1),  # Matroska: Channels, SamplingFrequency (an 8-byte float)
    (b"\xb5\x88", 2, 8),
    (b"\xff\xf1", 2, 2),  # ADTS: rate index and channel configuration
    (b"\xff\xfb", 2, 1),  # MP3 frame header: bit rate and rate index
)


@dataclass(frozen=True, slots=True)
class MutatedUpload:
    """A seed and the mutations made to it, each described well enough to replay it (``data`` is what is sent)."""

    seed: str
    steps: tuple[str, ...]
    data: bytes = field(repr=False)

    def _repr_pretty_(self, printer: RepresentationPrinter, cycle: bool) -> None:
        """What Hypothesis prints of a falsifying example: the recipe, not a megabyte of bytes."""
        printer.text(repr(self))


@dataclass(frozen=True, slots=True)
class Fuzzed:
    """The gateway under fuzzing, its one tenant's client, and the server's footprint once warm."""

    gateway: GatewayProcess
    client: UploadClient
    warm: ServerFootprint

    def assert_alive(self) -> None:
        process = self.gateway.process
        assert process is not None
        assert process.poll() is None, f"the gateway died ({process.returncode}):\n{self.gateway.log()[-4000:]}"


def seeds() -> dict[str, bytes]:
    """Valid uploads of every container and multichannel shape, and the hostile ones."""
    made = {kind: recording(kind, tone(SEED_SECONDS)) for kind in CONTAINERS}
    shapes: tuple[tuple[Literal["wav", "flac"], int], ...] = (("wav", 6), ("wav", 8), ("flac", 6), ("flac", 8))
    for container, channels in shapes:
        made[f"{container}_{channels}ch"] = multichannel_recording(container, channels, 48000, SEED_SECONDS)
    return made | {name: make() for name, make in HOSTILE_UPLOADS.items()}


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    with GatewayProcess(upload_gateway_config({"fuzzer": KEY}), tmp_path_factory.mktemp("fuzz")) as gateway:
        client = UploadClient(gateway.base_url, KEY)
        try:
            for route in ROUTES:  # warm-up: the first decoding on each route loads what it needs once
                accepted = client.upload(route, recording("wav"), "warm-up.wav")
                assert accepted.status_code == 201, accepted.text
                client.forget(route, accepted)
            assert gateway.process is not None
            yield Fuzzed(gateway, client, ServerFootprint.of(gateway.process.pid))
        finally:
            client.close()


# ---------------------------------------------------------------------------------------------------- mutations
def _flip(draw: st.DrawFn, data: bytes) -> tuple[bytes, str]:
    at = draw(st.integers(0, len(data) - 1))
    mask = draw(st.integers(1, 255))
    return data[:at] + bytes([data[at] ^ mask]) + data[at + 1 :], f"xor {mask:#04x} at {at}"


def _insert(draw: st.DrawFn, data: bytes) -> tuple[bytes, str]:
    at = draw(st.integers(0, len(data)))
    chunk = draw(st.binary(min_size=1, max_size=MAX_CHUNK))
    return data[:at] + chunk + data[at:], f"insert {chunk.hex()} at {at}"


def _delete(draw: st.DrawFn, data: bytes) -> tuple[bytes, str]:
    at = draw(st.integers(0, len(data) - 1))
    size = draw(st.integers(1, MAX_CHUNK))
    return data[:at] + data[at + size :], f"delete {size} at {at}"


def _truncate(draw: st.DrawFn, data: bytes) -> tuple[bytes, str]:
    keep = draw(st.integers(0, len(data) - 1))
    return data[:keep], f"truncate to {keep}"


def _rewrite_field(draw: st.DrawFn, data: bytes) -> tuple[bytes, str]:
    """A random integer where a known header field lies (the first such field of the file), else at a random offset
    of its first 64 bytes: a rate, a channel count or a sample size no encoder would write."""
    present = [(data.find(marker) + offset, width) for marker, offset, width in HEADER_FIELDS if marker in data]
    at, width = (
        draw(st.sampled_from(present)) if present else (draw(st.integers(0, 63)), draw(st.sampled_from((1, 2, 4))))
    )
    value = draw(st.integers(0, 256**width - 1))
    order: Literal["little", "big"] = draw(st.sampled_from(("little", "big")))
    return data[:at] + value.to_bytes(width, order) + data[at + width :], f"{width}-byte {order} {value} at {at}"


MUTATIONS: tuple[Callable[[st.DrawFn, bytes], tuple[bytes, str]], ...] = (
    _flip,
    _insert,
    _delete,
    _truncate,
    _rewrite_field,
)


@st.composite
def mutated(draw: st.DrawFn, seeded: dict[str, bytes]) -> MutatedUpload:
    """One seed with one to four mutations."""
    name = draw(st.sampled_from(sorted(seeded)))
    data, steps = seeded[name], []
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        data, step = draw(st.sampled_from(MUTATIONS))(draw, data)
        steps.append(step)
    return MutatedUpload(name, tuple(steps), data)


# ---------------------------------------------------------------------------------------------------- the test
def test_mutated_uploads_are_answered_and_the_server_stands(fuzzed: Fuzzed) -> None:
    seeded = seeds()
    tried: list[int] = []

    @given(upload=mutated(seeded), route=st.sampled_from(ROUTES))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=SEED is None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def post(upload: MutatedUpload, route: UploadRoute) -> None:
        note(f"{route}: {upload!r}")  # Hypothesis's own report of the arguments is blank under pytest
        fuzzed.assert_alive()  # Hypothesis replays the failing example: then the server is dead already
        response = fuzzed.client.upload(route, upload.data)  # a dropped connection raises here
        tried.append(response.status_code)
        assert 200 <= response.status_code < 500, response.text
        fuzzed.client.forget(route, response)
        fuzzed.assert_alive()

    run = post if SEED is None else seed(int(SEED))(post)
    run()
    assert len(tried) >= min(EXAMPLES, 10)
    assert httpx.get(f"{fuzzed.gateway.base_url}/healthz", timeout=30).status_code == 200
    now = ServerFootprint.of(fuzzed.warm.pid)
    assert now.same_process(fuzzed.warm)
    assert now.rss - fuzzed.warm.rss < GROWTH_LIMIT_BYTES, (
        f"resident memory grew {(now.rss - fuzzed.warm.rss) / 1e6:.0f} MB"
    )
    peak_growth = now.peak_rss - fuzzed.warm.peak_rss
    assert peak_growth < GROWTH_LIMIT_BYTES, f"its peak resident memory grew {peak_growth / 1e6:.0f} MB"
