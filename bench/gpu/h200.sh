#!/bin/bash
# One run on a lent GPU machine (the workplace's `device` tool): the ChatTTS batching benchmark on CUDA, full-size
# random weights generated there. Writes env.txt, dmon.txt and t<tokens>.json under $OUT. Not run yet: the session
# that wrote it was not lent a machine in the end.
#
# The GPU image has torch, torchaudio, transformers, numpy, numba, scipy, einops, psutil, pyyaml; carry the rest as
# Python 3.12 wheels in .whl/ (listed in .git/info/exclude), the versions of our venv (4 MB in all):
#   annotated_types cffi chattts encodec einx frozendict loguru pybase16384 pycparser pydantic pydantic_core
#   pydantic_settings python_dotenv torch_einops_utils typing_extensions typing_inspection vector_quantize_pytorch
#   vocos
# (`pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 ...`;
# chattts and encodec publish no wheels: `pip wheel --no-deps chattts==0.2.5 encodec==0.1.1 -w .whl`). Then:
#   run(command="bash bench/gpu/h200.sh 2>&1 | tee $OUT/log.txt", carry=[".whl"], timeout_s=480)
# Env knobs (PY, DEV, PRESET, TA, TB, LEVELS, REPA, SKIP_PIP) exist for a dry run on a CPU.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
PY=${PY:-python3}; DEV=${DEV:-cuda}; PRESET=${PRESET:-full}; ASSETS=${ASSETS:-/tmp/chattts-full}
TA=${TA:-64}; TB=${TB:-256}; LEVELS=${LEVELS:-1,2,4,8,16,32}; REPA=${REPA:-3}
if [ -z "${SKIP_PIP:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || { echo "pip install failed"; exit 3; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
{
  date -u; nvidia-smi; nproc; free -g; uname -r
  $PY - <<'PY'
import sys, torch, torchaudio, transformers, numpy, ChatTTS, pydantic, pydantic_settings, vocos, vector_quantize_pytorch, tokenizers
print(sys.version)
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available(), torch.cuda.is_available() and torch.cuda.get_device_name(0))
print("torchaudio", torchaudio.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__,
      "numpy", numpy.__version__, "pydantic", pydantic.__version__)
import gateway.settings, engines.pool, engines.chattts.loader  # noqa
print("imports ok")
PY
} > $OUT/env.txt 2>&1
cat $OUT/env.txt
echo "== [$(el)s] smoke: tiny assets, engine in-process on $DEV"
DEV=$DEV $PY - <<'PY' 2>&1
import os, time
from pathlib import Path
from engines.base import CancelFlag, SynthesisRequest
from engines.chattts.assets import generate_assets
from engines.chattts.engine import ChatTTSEngine
generate_assets(Path("/tmp/ctts-smoke"), "tiny")
e = ChatTTSEngine({"source": "dir", "path": "/tmp/ctts-smoke", "device": os.environ["DEV"], "max_new_token": 16, "min_new_token": 16})
print(e.load())
t = time.monotonic(); n = sum(len(c) for c in e.synthesize(SynthesisRequest("Hello there, GPU.", "alloy", seed=1), CancelFlag()))
print("smoke samples", n, "s", round(time.monotonic() - t, 3))
PY
nvidia-smi dmon -s um -d 2 -o T > $OUT/dmon.txt 2>&1 &
DMON=$!
echo "== [$(el)s] generating $PRESET assets"
[ -e $ASSETS/tts-gateway-assets.json ] || $PY -c "import sys; from pathlib import Path; from engines.chattts.assets import generate_assets; generate_assets(Path(sys.argv[1]), sys.argv[2])" $ASSETS $PRESET 2>&1
du -sh $ASSETS
echo "== [$(el)s] tokens $TA"
S=$(date +%s)
timeout $(( 400 - $(el) )) $PY bench/chattts_batching.py --assets $ASSETS --device $DEV --tokens $TA --concurrency $LEVELS --repeat $REPA --json $OUT/t$TA.json 2>&1
DA=$(( $(date +%s) - S )); echo "tokens $TA took ${DA}s"
LEFT=$(( 440 - $(el) ))
R=1; [ $DA -lt 70 ] && R=2
echo "== [$(el)s] tokens $TB, repeat $R, timeout ${LEFT}s"
[ $LEFT -gt 40 ] && timeout $LEFT $PY bench/chattts_batching.py --assets $ASSETS --device $DEV --tokens $TB --concurrency $LEVELS --repeat $R --json $OUT/t$TB.json 2>&1
kill $DMON 2>/dev/null
echo "== [$(el)s] done"
