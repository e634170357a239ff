"""Uploaded recordings, decoded apart from the server: consent recordings and voice samples reach FFmpeg only in
decoder processes of their own, each capped in memory, CPU time and wall-clock time, replaced when they end; the
uploads a tenant and the replica hold at once are bounded before their bodies are read.

- ``settings.py``: :class:`UploadSettings` (``uploads`` in the configuration).
- ``service.py``: :class:`Uploads`, what the routes use (admission, decoding).
- ``processes.py``: :class:`DecoderProcesses`, the decoder processes, started warm and replaced.
- ``decoder.py``: the decoder process itself; ``wire.py``: the pipe between the two (data, not pickle).
- ``errors.py``: the replica's refusals (429, 503).
"""

from gateway.uploads.errors import TooManyUploadsError, UploadsBusyError
from gateway.uploads.processes import DecoderProcesses
from gateway.uploads.service import Uploads
from gateway.uploads.settings import UploadSettings

__all__ = ["DecoderProcesses", "TooManyUploadsError", "UploadSettings", "Uploads", "UploadsBusyError"]
