"""Engine kinds by name, imported lazily so that the server process never imports torch."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pydantic import BaseModel

    from engines.base import Engine

__all__ = ["ENGINE_KINDS", "PRELOAD", "SPEAKER_CHECKS", "check_speaker", "create_engine", "ready_to_fork"]

#: kind -> "module:class"; the class takes its kind's options model (``engines.settings``), or the plain values it
#: validates into one.
ENGINE_KINDS: dict[str, str] = {
    "chattts": "engines.chattts:ChatTTSEngine",
    "espeak": "engines.espeak:EspeakEngine",
    "synthetic": "engines.synthetic:SyntheticEngine",
}

#: kind -> what its worker template imports before forking workers (``engines/template.py``): the engine's module and
#: the heavy libraries it imports when it loads, so that a worker forked from the template pays only for its weights.
#: A missing one costs a worker its import, nothing else.
PRELOAD: dict[str, tuple[str, ...]] = {
    "chattts": (
        "numpy",
        "torch",
        "transformers",
        "vocos",
        "ChatTTS",
        "engines.chattts",
        "engines.chattts.generation",
        "engines.chattts.streaming",
        "engines.worker",
    ),
    "espeak": ("numpy", "espeakng_loader", "engines.espeak", "engines.worker"),
    "synthetic": ("numpy", "engines.synthetic", "engines.worker"),
}


def create_engine(kind: str, options: BaseModel | Mapping[str, object]) -> Engine:
    """Instantiate an engine of ``kind`` with its options (validated, or plain values it validates); called inside the
    worker process."""
    module_name, class_name = ENGINE_KINDS[kind].split(":")
    engine_class = getattr(importlib.import_module(module_name), class_name)
    engine: Engine = engine_class(options)
    return engine


#: kind -> "module:function" telling from its options, cheaply and without torch, whether a worker could load now
#: (the weights are there); kinds not listed always can.
_READY_TO_FORK: dict[str, str] = {"chattts": "engines.chattts.loader:weights_present"}


def ready_to_fork(kind: str, options: BaseModel) -> bool:
    """Whether a worker of ``kind`` is worth forking from its template: not while its weights are missing, for the
    template would import torch for an engine that cannot load (``engines/template.py``). Called in the server."""
    target = _READY_TO_FORK.get(kind)
    if target is None:
        return True
    present: bool = _function(target)(options)
    return present


#: kind -> "module:function" refusing a custom voice's speaker (``SynthesisRequest.speaker``: an engine's speaker
#: string, or ``seed:N``) that an engine of that kind, with those options, could never speak with. It judges from the
#: options and the speaker alone, cheaply and without torch (the server asks it when a voice is made, before any
#: worker may have loaded), and raises ``InvalidSynthesisRequestError`` naming ``speaker`` (malformed for it) or
#: ``model`` (the kind takes no custom voices).
SPEAKER_CHECKS: dict[str, str] = {
    "chattts": "engines.chattts.speaker_strings:check_speaker",
    "espeak": "engines.espeak.engine:check_speaker",
    "synthetic": "engines.synthetic:check_speaker",
}


def check_speaker(kind: str, options: BaseModel, speaker: str) -> None:
    """Refuse ``speaker`` for an engine of ``kind`` with ``options`` (see :data:`SPEAKER_CHECKS`). Called in the
    server.

    Raises:
        InvalidSynthesisRequestError: the engine could not speak with it (``param`` ``speaker`` or ``model``).
    """
    _function(SPEAKER_CHECKS[kind])(options, speaker)


def _function(target: str) -> Callable[..., Any]:
    module_name, function_name = target.split(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module_name), function_name)
    return function
