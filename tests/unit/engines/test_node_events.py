"""An engine node's server-sent events read back into PCM and word marks (``engines/remote/node_events.py``), fed the
bytes in any pieces, as they come off the socket."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from engines.remote.node_events import MalformedEventsError, NodeEvents
from engines.timing import WordMark

TEXT = "Two words."  # "Two" [0, 3), "words" [4, 9)


def event(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\r\n\r\n".encode()


def delta(samples: int) -> bytes:
    return event({"type": "speech.audio.delta", "audio": base64.b64encode(b"\1\0" * samples).decode()})


def words(*spans: tuple[int, int, float, float]) -> bytes:
    return event({
        "type": "speech.audio.timestamps",
        "kind": "exact",
        "words": [{"char_start": a, "char_end": b, "start": s, "end": e} for a, b, s, e in spans],
    })  # fmt: skip


DONE = event({"type": "speech.audio.done", "usage": {}})
# 0.5 s of audio at 1 kHz, then the first word; 0.5 s more, then the second, whose end the node rounded past the audio.
STREAM = delta(500) + words((0, 3, 0.1, 0.4)) + delta(500) + words((4, 9, 0.55, 1.02)) + DONE


def read(node: NodeEvents, data: bytes, piece: int) -> list[Any]:
    items = []
    for at in range(0, len(data), piece):
        items += node.feed(data[at : at + piece])
    return items


@pytest.mark.parametrize("piece", [1, 7, len(STREAM)])
def test_audio_and_marks_come_in_the_nodes_order_whatever_the_pieces(piece: int) -> None:
    node = NodeEvents(len(TEXT), 1000, marks=True)
    items = read(node, STREAM, piece)
    pcm = [item for item in items if isinstance(item, bytes)]
    assert b"".join(pcm) == b"\1\0" * 1000
    kinds = ["pcm" if isinstance(item, bytes) else "marks" for item in items]
    assert kinds.index("marks") > 0 and kinds[-1] == "marks"  # a word after the audio it starts in
    marks = [mark for item in items if isinstance(item, tuple) for mark in item]
    assert marks == [WordMark(0, 3, 100, 400), WordMark(4, 9, 550, 1000)]  # no mark outlasts the audio before it
    assert node.done


def test_without_marks_the_timestamps_are_passed_over() -> None:
    node = NodeEvents(len(TEXT), 1000, marks=False)
    assert all(isinstance(item, bytes) for item in node.feed(STREAM))


@pytest.mark.parametrize(
    "bad",
    [
        b"data: not json\n\n",
        event({"type": "speech.audio.delta", "audio": "not base64!"}),
        event({"type": "something.else"}),
        delta(10) + words((4, 9, 0.0, 0.01), (0, 3, 0.0, 0.01)),  # out of order
        delta(10) + words((0, 30, 0.0, 0.01)),  # past the text
        delta(10) + event({"type": "speech.audio.timestamps", "words": [{"char_start": 0}]}),
        DONE + delta(10),
        b"data: " + b"x" * (5 * 1024 * 1024),
    ],
    ids=["json", "base64", "type", "order", "text", "shape", "after-done", "too-long"],
)
def test_a_malformed_answer_is_refused(bad: bytes) -> None:
    with pytest.raises(MalformedEventsError):
        NodeEvents(len(TEXT), 1000, marks=True).feed(bad)
