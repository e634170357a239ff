"""The settings of upload decoding (``uploads`` in the configuration): the decoder processes and their caps, and
what uploads may hold at once."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["UploadSettings"]


class UploadSettings(BaseModel):
    """Consent recordings and voice samples are decoded by decoder processes of their own, never by the server
    (``gateway/uploads``). The defaults fit a 30 s recording, which takes about 0.2 s of CPU and 30 MB to decode, many
    times over."""

    model_config = ConfigDict(extra="forbid")

    decoders: int = Field(default=2, ge=1, le=64)
    """Decoder processes kept started, each decoding one upload at a time (about 60 MB each while idle). More uploads
    at once wait for one, up to ``queue_timeout_s``."""
    decoder_memory_mb: int = Field(default=256, ge=32)
    """Memory a decoder may map beyond what it holds idle (its address space is capped there); past it, that upload
    gets ``400`` ``invalid_audio`` and the decoder is replaced. A 30 s recording needs about 30 MB."""
    decoder_cpu_s: int = Field(default=5, ge=1)
    """CPU seconds one decoding may take (a 30 s recording takes about 0.2 s); past it, the decoder is killed and the
    upload gets ``400`` ``invalid_audio``."""
    decode_timeout_s: float = Field(default=10.0, gt=0)
    """Wall-clock time one decoding may take, sending the upload to its decoder included: beyond it the decoder is
    killed, the upload gets 400 ``invalid_audio`` (503 ``uploads_busy`` where the decoder was still waiting for the CPU
    then, having run for less than half of it: the machine was busy, not the upload at fault)."""
    decoder_priority: Literal["idle", "low"] = "idle"
    """How decoders share the CPU with speech. ``idle`` (Linux's ``SCHED_IDLE``): a decoder runs only on CPU the
    server and the engines leave and gives it up the moment they want it, so uploads, hostile or not, cost the first
    byte of speech streaming beside them almost nothing; on a machine whose cores synthesis keeps busy, uploads wait,
    up to ``decode_timeout_s``, then ``503``. ``low``: a niceness 10 above the server's: a decoder gets about a tenth
    of a core that speech wants, so uploads finish on a saturated machine, at some cost to speech's first byte
    (BENCHMARKS.md, "Hostile uploads"). Where ``SCHED_IDLE`` is not to be had, ``idle`` runs as ``low`` and the log
    says so once."""
    decodes_per_decoder: int = Field(default=200, ge=1)
    """Decodings a decoder serves before it is replaced by a fresh one (nothing one upload left behind lasts)."""
    queue_timeout_s: float = Field(default=15.0, gt=0)
    """How long an upload waits for a free decoder before ``503`` ``uploads_busy`` with ``Retry-After``."""
    max_per_tenant: int = Field(default=4, ge=1)
    """Uploads one tenant may have in flight on a replica, from the first byte of its body to the answer; one more
    gets ``429`` ``concurrency_limit_exceeded`` with ``Retry-After`` before its body is read."""
    max_spooled_mb: int = Field(default=256, ge=16)
    """Upload bodies all tenants may have in flight on a replica, in MiB, counted by their declared
    ``Content-Length`` (a body without one counts as the largest allowed, 10 MiB and the form's framing); one more
    gets ``503`` ``uploads_busy`` with ``Retry-After`` before its body is read. Bodies over 1 MiB are spooled to the
    temporary directory: keep this under its size (the Helm chart sets it to half of ``tmpSizeLimit``)."""
