# syntax=docker/dockerfile:1
# chattts-gateway: the OpenAI-compatible speech gateway with ChatTTS and espeak-ng (docs/deployment.md).
#
# CPU image (default):
#   docker build -t chattts-gateway:0.1.0 .
# CUDA image: PyTorch's CUDA wheel index (the cu12x wheels bring the CUDA runtime libraries; the NVIDIA container
# toolkit on the node brings the driver), optionally on an nvidia/cuda runtime base that has Python 3.11:
#   docker build -t chattts-gateway:0.1.0-cuda --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
# then deploy with the chart's gpu.enabled=true (docs/deployment.md).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# torch goes in first, pinned, from PyTorch's own index: a bare `torch` (or the one ChatTTS pulls in) would resolve
# to PyPI's multi-GB CUDA build. cpu: https://download.pytorch.org/whl/cpu; CUDA: .../whl/cu128 (or cu126, ...).
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

# The root filesystem is read-only in Kubernetes: every cache (Hugging Face, numba, ...) goes under HOME=/tmp, a
# writable emptyDir there. NVIDIA_*: which GPUs and driver parts the NVIDIA runtime exposes (ignored without one).
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    HOME=/tmp \
    NUMBA_CACHE_DIR=/tmp/numba-cache

RUN groupadd --system --gid 10001 gateway \
    && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin gateway

WORKDIR /app

RUN python -m pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

# Every other dependency at the version the lock file names (`make lock` writes it; `make serve` installs the same).
# Its `torch==2.13.0` is the wheel installed above: 2.13.0+cpu and 2.13.0+cu128 both satisfy it, so pip keeps it.
COPY requirements/serve.txt ./requirements/serve.txt
RUN python -m pip install -r requirements/serve.txt "torch==${TORCH_VERSION}"

COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY engines ./engines
COPY auth ./auth
COPY storage ./storage
COPY lifecycle ./lifecycle
COPY scripts/fix_torchaudio.py ./scripts/fix_torchaudio.py

# The gateway itself, its dependencies being the lock's (whose setuptools builds it). Then fix_torchaudio.py: ChatTTS
# (and vocos) import torchaudio at module level, and the locked torchaudio is a CUDA build whose metadata accepts a
# CPU torch; its compiled extension then fails to load (libc10_cuda.so missing) and `import ChatTTS` with it. In
# exactly that case the script deletes torchaudio's .so files, so torchaudio runs in pure-Python mode (all ChatTTS
# needs is MelSpectrogram), and checks that it works. It changes nothing where torchaudio already imports (the CUDA
# image).
RUN python -m pip install --no-deps --no-build-isolation . \
    && python scripts/fix_torchaudio.py

USER 10001:10001
EXPOSE 8000
ENTRYPOINT ["chattts-gateway"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
