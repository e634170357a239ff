"""The order in which a pass's due chunks are decoded: first chunks before the others.

A chunk's decode (DVAE + Vocos) blocks the batch, and every chunk due at one pass used to be decoded before any of
them left. When a request's first chunk falls due at the same pass as another row's later or last chunk (at a
closed loop's steady state, the last chunk of the request that ends as the new one joins, the whole segment's
tokens when its later chunks were held), the new request waited for that bigger decode too. Decoded in two rounds,
first chunks first, each round's audio leaves before the next round starts: a first chunk waits for no one's
later audio, and the later chunks leave one first chunk's decode later than they would have, which their listeners
(already speaking) absorb. First chunks due together (requests that arrived together) go one round each, in turn:
the k-th new listener waits for k first chunks' decodes, not for all of them, as batching them into one call would
make every one of them wait (served at concurrency 8 on 2 cores: first audio p50 7-13 % sooner, throughput level;
docs/engineering/benchmark-history.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["Started", "first_chunks_first"]


class Started(Protocol):
    """What :func:`first_chunks_first` asks of a stream decoder (:class:`engines.chattts.streaming.StreamDecoder`)."""

    @property
    def started(self) -> bool: ...


Due = TypeVar("Due")


def first_chunks_first(
    due: Sequence[Due], decoder: Callable[[Due], Started | None], apart: Callable[[Due], bool] | None = None
) -> list[list[Due]]:
    """``due`` in decode rounds: each chunk whose ``decoder`` has not started (a first chunk) a round of its own, in
    the given order, then the later chunks ``apart`` says so (a seeded request's: decoded in one call with a window
    of its length, its audio would round otherwise) a round each, then the others in one round, in the given order."""
    first: list[Due] = []
    alone: list[Due] = []
    later: list[Due] = []
    for item in due:
        stream = decoder(item)
        if stream is not None and not stream.started:
            first.append(item)
        else:
            (alone if apart is not None and apart(item) else later).append(item)
    return [[item] for item in first + alone] + ([later] if later else [])
