# ruff: noqa: PLC0415 - torch, transformers and ChatTTS are imported lazily: the server process never loads them
"""Find, verify and load ChatTTS weights: a Hugging Face snapshot (``hub``) or a directory the user provides (``dir``).

Verification: a directory carrying the generator's marker (``tts-gateway-assets.json``, see
``engines.chattts.assets``) is checked against its own ``sha256_map.json`` and loaded with its own
``chattts_config.json``; every other directory must match the sha256 map ChatTTS publishes in its package
(``ChatTTS/res/sha256_map.json``) and is loaded with ChatTTS's built-in configuration. ChatTTS's ``source="local"``
is never used: it renames files that do not match to ``*.bak`` and tries to download replacements.
"""

from __future__ import annotations

import copy
import json
import os
import socket
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from engines.base import EngineUnavailableError
from engines.chattts.assets import ASSET_FILES, CONFIG_FILE, HASH_FILE, MARKER_FILE, config_from_dict, sha256_file

if TYPE_CHECKING:
    import torch

    from engines.chattts.options import ChatTTSOptions

__all__ = [
    "LoadedWeights",
    "WeightsLocation",
    "hub_snapshot",
    "load_chat",
    "locate_weights",
    "published_hashes",
    "weights_present",
]

HUB_REPO = "2Noise/ChatTTS"


@dataclass(frozen=True, slots=True)
class WeightsLocation:
    """A verified model directory and what it holds."""

    path: Path
    generated: bool
    """Random weights from ``generate_assets`` (recognised by the marker file)."""
    description: str
    hashes: dict[str, str] = field(default_factory=dict)
    """Each weight file's sha256 (ChatTTS's keys, ``ASSET_FILES``), as verified."""


@dataclass(frozen=True, slots=True)
class LoadedWeights:
    chat: Any
    """The loaded ``ChatTTS.Chat``."""
    location: WeightsLocation


def published_hashes() -> dict[str, str]:
    """The sha256 map ChatTTS ships for its released weights."""
    text = resources.files("ChatTTS").joinpath("res/sha256_map.json").read_text()
    hashes: dict[str, str] = json.loads(text)
    return hashes


def verify_directory(path: Path) -> WeightsLocation:
    """Check every weight file of ``path`` against the right hash map; raise ``EngineUnavailableError`` if not."""
    if not path.is_dir():
        raise EngineUnavailableError(f"ChatTTS weights directory {path} does not exist")
    generated = (path / MARKER_FILE).is_file()
    if generated:
        try:
            expected: dict[str, str] = json.loads((path / HASH_FILE).read_text())
            marker = json.loads((path / MARKER_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise EngineUnavailableError(f"generated ChatTTS assets in {path} are incomplete: {exc}") from exc
        reference = f"its own {HASH_FILE}"
        description = f"generated random weights (preset {marker.get('preset')}, seed {marker.get('seed')})"
    else:
        expected, reference, description = published_hashes(), "ChatTTS's published sha256 map", "ChatTTS 2Noise"
    for key, relative in ASSET_FILES.items():
        file = path / relative
        if not file.is_file():
            raise EngineUnavailableError(f"ChatTTS weights in {path} are incomplete: {relative} is missing")
        if key not in expected or sha256_file(file) != expected[key]:
            raise EngineUnavailableError(f"ChatTTS weights in {path}: {relative} does not match {reference}")
    return WeightsLocation(path, generated, description, {key: expected[key] for key in ASSET_FILES})


def hub_snapshot(cache_dir: Path) -> Path | None:
    """The newest downloaded snapshot of the ChatTTS repo in ``cache_dir`` (the layout ChatTTS's hub source uses)."""
    snapshots = cache_dir / f"models--{HUB_REPO.replace('/', '--')}" / "snapshots"
    candidates = [p for p in snapshots.glob("*") if p.is_dir()] if snapshots.is_dir() else []
    return max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None


def weights_present(options: ChatTTSOptions) -> bool:
    """Whether the weights are where ``options`` say, without verifying or fetching them (cheap, and torch-free: the
    server asks it). A pool forks workers from its warm template only then (``engines/pool/``); otherwise the worker
    starts cold, finds out in milliseconds what is missing (or downloads it) and says so, and no template importing
    torch is kept for an engine that cannot load."""
    if options.source == "dir":
        return bool(options.path) and Path(str(options.path)).expanduser().is_dir()
    return hub_snapshot(Path(options.cache_dir).expanduser()) is not None


def locate_weights(source: str, path: str | None, cache_dir: Path, download: bool, timeout_s: float) -> WeightsLocation:
    """Resolve the options to a verified directory, downloading the hub snapshot once when allowed and reachable."""
    if source == "dir":
        if not path:
            raise EngineUnavailableError("ChatTTS source 'dir' needs the 'path' option (a directory with asset/)")
        return verify_directory(Path(path).expanduser())
    snapshot = hub_snapshot(cache_dir)
    if snapshot is None:
        snapshot = _download(cache_dir, download, timeout_s)
    return verify_directory(snapshot)


def _download(cache_dir: Path, download: bool, timeout_s: float) -> Path:
    nothing = f"no ChatTTS snapshot in {cache_dir}"
    if not download:
        raise EngineUnavailableError(f"{nothing} and downloading is disabled (option download: false)")
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}:
        raise EngineUnavailableError(f"{nothing} and HF_HUB_OFFLINE is set")
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if (reason := _unreachable(endpoint, timeout_s)) is not None:
        raise EngineUnavailableError(f"{nothing} and the Hugging Face hub is unreachable ({reason})")
    import ChatTTS

    # ChatTTS's own hub path: snapshot_download(repo 2Noise/ChatTTS, cache_dir=custom_path), reused offline later.
    downloaded = ChatTTS.Chat().download_models(source="huggingface", custom_path=str(cache_dir))
    if downloaded is None:
        raise EngineUnavailableError(f"{nothing} and downloading {HUB_REPO} from the hub failed")
    return Path(downloaded)


def _unreachable(endpoint: str, timeout_s: float) -> str | None:
    # A quick TCP probe first: without it a machine with no route would spend minutes in the hub client's retries.
    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"{host}:{port}: {exc}"


def load_chat(location: WeightsLocation, device: torch.device, dtype: torch.dtype) -> Any:
    """Load ``ChatTTS.Chat`` from a verified directory, bypassing ChatTTS's own download and hash logic, with the GPT
    backbone in ``dtype`` (everything else stays float32)."""
    import ChatTTS
    from ChatTTS.config import Config

    chat = ChatTTS.Chat()
    if location.generated:
        chat.config = config_from_dict(json.loads((location.path / CONFIG_FILE).read_text()))
    else:
        chat.config = copy.deepcopy(Config())
    paths = {name: str(location.path / relative) for name, relative in asdict(chat.config.path).items()}
    if not chat._load(device=device, compile=False, **paths):
        raise EngineUnavailableError(f"ChatTTS could not load the weights in {location.path}")
    # The token loop casts the backbone's inputs to its dtype and its outputs back to float32.
    chat.gpt.gpt.to(dtype)
    return chat
