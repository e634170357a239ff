"""What the upload routes use: the admission of an upload's body, and its decoding in a decoder process."""

from __future__ import annotations

import functools
from collections import Counter
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO

import anyio
import anyio.to_thread

from gateway.uploads.errors import TooManyUploadsError, UploadsBusyError
from gateway.uploads.processes import DecoderStarvedError, NoDecoderError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gateway.audio.samples import DecodedRecording
    from gateway.uploads.processes import DecoderProcesses
    from gateway.uploads.settings import UploadSettings

__all__ = ["Uploads"]

_MIB = 1024 * 1024
_RETRY_AFTER_S = 2  # an upload takes a second or two to arrive and be decoded


class Uploads:
    """The uploads of one replica: how many each tenant has in flight, how many bytes they all hold, and the decoder
    processes that turn them into PCM.

    Counted per replica, not across replicas: what they bound, the spool on the replica's disk and its decoders,
    is the replica's own.
    """

    def __init__(self, settings: UploadSettings, decoders: DecoderProcesses) -> None:
        self._settings = settings
        self._decoders = decoders
        self._decoding = anyio.CapacityLimiter(decoders.size)
        self._by_tenant: Counter[str] = Counter()
        self._bytes_in_flight = 0

    @contextmanager
    def admit(self, tenant: str, body_bytes: int) -> Iterator[None]:
        """Hold a place for an upload of ``body_bytes`` (its declared length) from ``tenant`` while the block runs:
        enter it before the body is read.

        Raises:
            TooManyUploadsError: the tenant has ``max_per_tenant`` uploads in flight (429).
            UploadsBusyError: the bodies in flight would pass ``max_spooled_mb`` (503).
        """
        settings = self._settings
        if self._by_tenant[tenant] >= settings.max_per_tenant:
            raise TooManyUploadsError(settings.max_per_tenant, _RETRY_AFTER_S)
        if self._bytes_in_flight + body_bytes > settings.max_spooled_mb * _MIB:
            raise UploadsBusyError(
                "The gateway is receiving as many uploads as it can hold; retry soon.", _RETRY_AFTER_S
            )
        self._by_tenant[tenant] += 1
        self._bytes_in_flight += body_bytes
        try:
            yield
        finally:
            self._bytes_in_flight -= body_bytes
            self._by_tenant[tenant] -= 1
            if not self._by_tenant[tenant]:
                del self._by_tenant[tenant]

    async def decode(self, upload: BinaryIO) -> DecodedRecording:
        """``upload`` (a seekable file of at most 10 MiB) as 24 kHz mono PCM, decoded in a decoder process.

        Raises:
            RecordingError: not audio, unsupported, too short or too long, or its decoding ended badly.
            UploadsBusyError: no decoder was free within ``queue_timeout_s``, or the machine too busy to give one the
                CPU within ``decode_timeout_s`` (503).
        """
        wait_s = self._settings.queue_timeout_s
        busy = UploadsBusyError(f"Every upload decoder was busy for {wait_s:g} s; retry soon.", _RETRY_AFTER_S)
        with anyio.move_on_after(wait_s) as waiting:
            await self._decoding.acquire()
        if waiting.cancelled_caught:
            raise busy
        try:
            # One wait in all: what is left of it for a decoder process to be free (one may be starting anew).
            left_s = max(0.0, waiting.deadline - anyio.current_time())
            decode = functools.partial(self._decoders.decode, upload, wait_s=left_s)
            return await anyio.to_thread.run_sync(decode)
        except NoDecoderError:
            raise busy from None
        except DecoderStarvedError:
            timeout_s = self._decoders.settings.decode_timeout_s  # the decoders' own, which set the deadline
            message = f"The gateway was too busy to decode the upload within {timeout_s:g} s; retry soon."
            raise UploadsBusyError(message, _RETRY_AFTER_S) from None
        finally:
            self._decoding.release()
