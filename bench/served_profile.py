"""Where a served ChatTTS worker spends its engine time: the parts of ``bench.chattts_profile``, inside the gateway.

``bench.chattts_served --profile`` starts each gateway with a ``sitecustomize`` (:func:`write_hook`) that calls
:func:`install` in every process it starts; in the ChatTTS worker this wraps, once the engine modules load, the
decode step (``CodeBatch.step``: ``prefill`` with nothing running, ``step``, ``step+prefill``), the streaming decode
(``decode_windows``) and the engine's batch generator (``engine``: from the call until the batch ends, the worker's
handling of what it yields included), and after each batch writes the running totals (wall and process CPU seconds,
calls) to ``<dir>/<pid>.json``. :func:`read_totals` sums those files; the bench takes the difference across a level.
The engine code is not changed: nothing of this runs unless the bench asks for it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Sequence
    from types import ModuleType

__all__ = ["ENV", "install", "read_totals", "write_hook"]

ENV = "CHATTTS_BENCH_PROFILE_DIR"
PARTS = ("engine", "prefill", "step", "step+prefill", "decode")


class _Totals:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.wall: defaultdict[str, float] = defaultdict(float)
        self.cpu: defaultdict[str, float] = defaultdict(float)
        self.calls: defaultdict[str, int] = defaultdict(int)

    def add(self, part: str, wall: float, cpu: float) -> None:
        self.wall[part] += wall
        self.cpu[part] += cpu
        self.calls[part] += 1

    def timed(self, part: str, call: Callable[[], Any]) -> Any:
        started, cpu = time.perf_counter(), time.process_time()
        try:
            return call()
        finally:
            self.add(part, time.perf_counter() - started, time.process_time() - cpu)

    def write(self) -> None:
        # The pid now, not at install: a worker forked from a template process writes its own file.
        path = self.directory / f"{os.getpid()}.json"
        temporary = path.with_suffix(".part")
        temporary.write_text(json.dumps({"wall": self.wall, "cpu": self.cpu, "calls": self.calls}))
        temporary.replace(path)


def _patch_generation(module: Any, totals: _Totals) -> None:
    original = module.CodeBatch.step

    def step(self: Any) -> Any:
        running, waiting = self._rows is not None, bool(self._waiting)
        part = "step+prefill" if running and waiting else "step" if running else "prefill"
        return totals.timed(part, lambda: original(self))

    module.CodeBatch.step = step


def _patch_streaming(module: Any, totals: _Totals) -> None:
    original = module.decode_windows

    def decode_windows(*args: Any, **kwargs: Any) -> Any:
        return totals.timed("decode", lambda: original(*args, **kwargs))

    module.decode_windows = decode_windows


def _patch_engine(module: Any, totals: _Totals) -> None:
    original = module.ChatTTSEngine.synthesize_batch

    def synthesize_batch(self: Any, *args: Any, **kwargs: Any) -> Generator[Any, None, None]:
        started, cpu = time.perf_counter(), time.process_time()
        try:
            yield from original(self, *args, **kwargs)
        finally:
            totals.add("engine", time.perf_counter() - started, time.process_time() - cpu)
            totals.write()

    module.ChatTTSEngine.synthesize_batch = synthesize_batch


class _Finder(importlib.abc.MetaPathFinder):
    """Patches each watched module right after it has executed."""

    def __init__(self, patches: dict[str, Callable[[ModuleType], None]]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if name not in self.patches:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader, patch = spec.loader, self.patches[name]

        class Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)
                patch(module)

        spec.loader = Loader()
        return spec


def install() -> None:
    """Watch for the engine modules in this process, where the bench set :data:`ENV`."""
    directory = os.environ.get(ENV)
    if not directory:
        return
    totals = _Totals(Path(directory))
    patches = {
        "engines.chattts.generation": lambda module: _patch_generation(module, totals),
        "engines.chattts.streaming": lambda module: _patch_streaming(module, totals),
        "engines.chattts.engine": lambda module: _patch_engine(module, totals),
    }
    sys.meta_path.insert(0, _Finder(patches))


def write_hook(directory: Path) -> Path:
    """A folder holding a ``sitecustomize.py`` that installs the hook: put it first on ``PYTHONPATH``."""
    hook = directory / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text("from bench.served_profile import install\n\ninstall()\n")
    return hook


def read_totals(directory: Path) -> dict[str, dict[str, float]]:
    """Every process's totals, summed: ``{"wall": {part: s}, "cpu": {...}, "calls": {...}}``."""
    summed: dict[str, dict[str, float]] = {"wall": defaultdict(float), "cpu": defaultdict(float),
                                           "calls": defaultdict(float)}  # fmt: skip
    for path in directory.glob("*.json"):
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for kind, values in found.items():
            for part, value in values.items():
                summed[kind][part] += value
    return summed
