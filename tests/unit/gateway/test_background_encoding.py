"""A speech job's audio is encoded on a thread of its own at a lower CPU priority (issue #47): the same bytes as on the
event loop, and the loop stays free while LAME works (it releases the GIL)."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import numpy as np

from gateway.audio import AudioFormat, open_encoder
from gateway.speech.background import encode_in_background
from tests.audio_decode import decode_audio

RATE = 22050


def speech_like(seconds: float) -> bytes:
    t = np.arange(int(seconds * RATE)) / RATE
    return (np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2").tobytes()


async def test_the_background_thread_encodes_the_same_mp3() -> None:
    pieces = [speech_like(0.5)] * 6
    inline, background = open_encoder(AudioFormat.MP3, RATE), open_encoder(AudioFormat.MP3, RATE)
    expected = b"".join(inline.encode(piece) for piece in pieces) + inline.finish()
    encoded = b"".join([await encode_in_background(background.encode, piece) for piece in pieces])
    assert encoded + background.finish() == expected
    assert abs(decode_audio(expected, "mp3").duration - 3.0) < 0.1


async def test_it_runs_on_a_thread_of_lower_cpu_priority() -> None:
    def where(_: bytes) -> bytes:
        thread = threading.get_native_id()
        return f"{thread} {os.getpriority(os.PRIO_PROCESS, thread)}".encode()

    thread, nice = map(int, (await encode_in_background(where, b"")).split())
    here = threading.get_native_id()
    assert thread != here
    assert nice == min(19, os.getpriority(os.PRIO_PROCESS, here) + 10)


async def test_the_event_loop_runs_while_a_long_piece_is_encoded() -> None:
    encoder = open_encoder(AudioFormat.MP3, RATE)
    encoding = asyncio.ensure_future(encode_in_background(encoder.encode, speech_like(120)))
    ticks, started = 0, time.perf_counter()
    while not encoding.done():
        await asyncio.sleep(0.001)
        ticks += 1
    took_s = time.perf_counter() - started
    assert await encoding
    assert ticks > 1 and ticks >= took_s / 0.05, (ticks, took_s)  # the loop turned while LAME worked
