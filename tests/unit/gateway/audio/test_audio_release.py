"""Encoders dropped unfinished (a client left mid-stream) free their codecs at once, not at a later collection."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import pytest

from gateway.audio import AudioFormat, open_encoder

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow  # a full collection a test: left out of `make quick`


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def live(type_name: str) -> int:
    """How many objects of the type were made since the fixture's collection and are alive: with the collector off,
    they all stay in the youngest generation, so only it is walked (the whole heap of a process that has imported
    torch took seconds a test)."""
    return sum(1 for o in gc.get_objects(generation=0) if type(o).__name__ == type_name)


@pytest.mark.usefixtures("no_cyclic_gc")
@pytest.mark.parametrize("finish", [False, True], ids=["dropped unfinished", "finished"])
@pytest.mark.parametrize("fmt", list(AudioFormat), ids=str)
def test_a_dropped_encoder_leaves_no_codec_for_the_cyclic_collector(fmt: AudioFormat, finish: bool) -> None:
    before = {name: live(name) for name in ("OutputContainer", "AudioCodecContext", "Graph")}
    encoder = open_encoder(fmt, 24000, 1.5)
    encoder.encode(bytes(4800))  # 100 ms of silence: every codec has started
    if finish:
        encoder.finish()
    del encoder
    assert {name: live(name) for name in before} == before
