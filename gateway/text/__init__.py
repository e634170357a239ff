"""What is said, before any engine says it: SSML and ElevenLabs' break tags read into a :class:`Script` of spoken
spans and silences (``ssml.py``, ``breaks.py``), ``say-as`` expansions (``say_as.py``), and the one hook every
spoken span passes through (:data:`Pronounce`, where a tenant's pronunciation dictionaries apply: their rules
matched by ``lexicon.py``, read from and written as W3C PLS by ``pls.py``).

Nothing here knows engines' processes, HTTP or tenants: the speech service reads a request's input with
:func:`read_script` and each API maps :class:`MarkupError` to its own 400.
"""

from __future__ import annotations

from gateway.text.errors import MarkupError
from gateway.text.markup import Markup, read_script
from gateway.text.script import IDENTITY, Pronounce, Script, Silence, Speech
from gateway.text.ssml import is_ssml

__all__ = ["IDENTITY", "Markup", "MarkupError", "Pronounce", "Script", "Silence", "Speech", "is_ssml", "read_script"]
