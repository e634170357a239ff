"""The ChatTTS engine (``engines.chattts:ChatTTSEngine``); see ``engine``, ``loader``, ``assets``, ``voices``,
``text``, ``generation`` and ``streaming``. Importing this package does not import torch or ChatTTS."""

from __future__ import annotations

from engines.chattts.engine import ChatTTSEngine

__all__ = ["ChatTTSEngine"]
