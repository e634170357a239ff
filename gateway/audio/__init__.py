"""Audio codecs for speech responses: formats, and streaming encoders that resample and change tempo.

Knows nothing of engines or HTTP: engines hand over 16-bit mono PCM, responses take encoded bytes.
"""

from __future__ import annotations

from gateway.audio.encoders import MAX_TEMPO, MIN_TEMPO, AudioEncoder, open_encoder, open_encoding, wav_header
from gateway.audio.formats import CONTENT_TYPES, AudioFormat, Codec, Encoding, output_sample_rate
from gateway.audio.g711 import G711_SAMPLE_RATE, G711Law, open_g711_encoder
from gateway.audio.whole import whole_file

__all__ = [
    "CONTENT_TYPES",
    "G711_SAMPLE_RATE",
    "MAX_TEMPO",
    "MIN_TEMPO",
    "AudioEncoder",
    "AudioFormat",
    "Codec",
    "Encoding",
    "G711Law",
    "open_encoder",
    "open_encoding",
    "open_g711_encoder",
    "output_sample_rate",
    "wav_header",
    "whole_file",
]
