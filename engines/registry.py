"""Engine kinds by name, imported lazily so that the server process never imports torch."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pydantic import BaseModel

    from engines.base import Engine

__all__ = ["ENGINE_KINDS", "create_engine"]

#: kind -> "module:class"; the class takes its kind's options model (``engines.settings``), or the plain values it
#: validates into one.
ENGINE_KINDS: dict[str, str] = {
    "chattts": "engines.chattts:ChatTTSEngine",
    "espeak": "engines.espeak:EspeakEngine",
    "synthetic": "engines.synthetic:SyntheticEngine",
}


def create_engine(kind: str, options: BaseModel | Mapping[str, object]) -> Engine:
    """Instantiate an engine of ``kind`` with its options (validated, or plain values it validates); called inside the
    worker process."""
    module_name, class_name = ENGINE_KINDS[kind].split(":")
    engine_class = getattr(importlib.import_module(module_name), class_name)
    engine: Engine = engine_class(options)
    return engine
