#!/usr/bin/env python3
"""Make ``import torchaudio`` work in an environment with a CPU-only torch.

Why this exists: ChatTTS imports torchaudio at module level (``ChatTTS/model/dvae.py``, and vocos does too), and all
it needs from it is ``torchaudio.transforms.MelSpectrogram``, which is pure Python on top of torch. But pip may
resolve ``torchaudio`` to a CUDA build whose metadata accepts a CPU build of torch (seen with torchaudio 2.11 and
torch 2.13.0+cpu). Its compiled extension (``torchaudio/lib/_torchaudio.so``) links against ``libc10_cuda.so``,
which a CPU torch does not ship, so ``import torchaudio`` fails with "cannot open shared object file" and ChatTTS
with it.

torchaudio loads its extension only when the ``.so`` files exist (``torchaudio._extension._load_lib`` returns False
for a missing file), and then runs in pure-Python mode. So in exactly that broken case (the import fails on a
missing CUDA library *and* torch has no CUDA) this script deletes ``torchaudio/lib/*.so`` and checks that
``MelSpectrogram`` works afterwards.

Run it with the environment's interpreter after ``pip install``: ``.venv/bin/python scripts/fix_torchaudio.py``.
It is idempotent and changes nothing where torchaudio already imports (or is not installed). Exit status: 0 when
torchaudio works (or is absent) afterwards, 1 otherwise.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

# Each probe runs in a fresh interpreter: a failed import leaves half-initialised modules behind.
_IMPORT_PROBE = "import torchaudio"
_MEL_PROBE = (
    "import torch, torchaudio\n"
    "mel = torchaudio.transforms.MelSpectrogram(sample_rate=24000, n_fft=1024, hop_length=256, n_mels=100)\n"
    "assert mel(torch.randn(1, 24000)).shape[-2] == 100\n"
)
_TORCH_HAS_CUDA_PROBE = "import torch, sys; sys.exit(0 if torch.version.cuda else 3)"
_CUDA_LIBRARY_HINTS = ("libc10_cuda", "libcudart", "libcuda.so", "libcublas", "libnvrtc", "cuda")


def _probe(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


def _torchaudio_lib_dir() -> Path | None:
    # find_spec does not import the package (importing it is what fails).
    spec = importlib.util.find_spec("torchaudio")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def _is_missing_cuda_library(stderr: str) -> bool:
    lowered = stderr.lower()
    return "cannot open shared object file" in lowered and any(hint in lowered for hint in _CUDA_LIBRARY_HINTS)


def main() -> int:
    """Detect the broken CUDA-torchaudio-on-CPU-torch case and repair it; see the module docstring."""
    lib_dir = _torchaudio_lib_dir()
    if lib_dir is None:
        print("fix_torchaudio: torchaudio is not installed; nothing to do")
        return 0
    imported = _probe(_IMPORT_PROBE)
    if imported.returncode == 0:
        print("fix_torchaudio: torchaudio imports; nothing to do")
        return 0
    if not _is_missing_cuda_library(imported.stderr):
        print(f"fix_torchaudio: torchaudio fails for another reason; not touching it:\n{imported.stderr}")
        return 1
    if _probe(_TORCH_HAS_CUDA_PROBE).returncode == 0:
        print("fix_torchaudio: torch has CUDA, so a missing CUDA library is a real install problem; not touching it")
        return 1
    removed = sorted(lib_dir.glob("*.so"))
    for library in removed:
        library.unlink()
    print(f"fix_torchaudio: removed {len(removed)} CUDA-linked libraries from {lib_dir}: {[p.name for p in removed]}")
    checked = _probe(_MEL_PROBE)
    if checked.returncode != 0:
        print(f"fix_torchaudio: torchaudio still does not work:\n{checked.stderr}")
        return 1
    print("fix_torchaudio: torchaudio now imports in pure-Python mode; MelSpectrogram works")
    return 0


if __name__ == "__main__":
    sys.exit(main())
