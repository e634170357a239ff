"""The espeak-ng engine (``engines.espeak:EspeakEngine``): ``engine`` drives ``library`` (ctypes on the
``espeakng-loader`` wheel) through ``stream`` (espeak's callbacks as a generator) with the ``voices`` table."""

from __future__ import annotations

from engines.espeak.engine import EspeakEngine

__all__ = ["EspeakEngine"]
