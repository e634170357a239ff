# ruff: noqa: PLC0415 - torch, transformers and ChatTTS are imported lazily: the server process never loads them
"""Random-weight ChatTTS asset directories, built offline from ChatTTS's own module classes.

Real ChatTTS weights are 1 GB and need the network; tests and benchmarks need weights that load through the very
same code path. :func:`generate_assets` writes a directory with the layout ChatTTS 0.2.5 reads, freshly initialised
weights, and three files at its root that the loader (``engines.chattts.loader``) recognises:

- ``tts-gateway-assets.json`` — the marker: who generated it, preset and seed;
- ``chattts_config.json`` — the model dimensions (``asdict`` of ``ChatTTS.config.Config``);
- ``sha256_map.json`` — the hashes of the nine weight files, in ChatTTS's key format, checked on every load.

Presets: ``tiny`` (hidden size 32, two layers: builds and loads in well under a second) for tests, and ``full``
(ChatTTS's real dimensions, the same FLOPs per token as the real model, and a tokenizer that reads English in about
as many tokens as the real one: ``engines.chattts.vocabulary``) for benchmarks.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from typing import TYPE_CHECKING, Any

from engines.chattts.vocabulary import english_pieces

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "ASSET_FILES",
    "CHATTTS_TAGS",
    "CONFIG_FILE",
    "HASH_FILE",
    "MARKER_FILE",
    "PRESETS",
    "config_from_dict",
    "generate_assets",
    "sha256_file",
]

MARKER_FILE = "tts-gateway-assets.json"
CONFIG_FILE = "chattts_config.json"
HASH_FILE = "sha256_map.json"
PRESETS = ("tiny", "full")

#: ChatTTS's sha256 keys (``ChatTTS/res/sha256_map.json``) and the files they cover, relative to the model dir.
ASSET_FILES: dict[str, str] = {
    "sha256_asset_Decoder_safetensors": "asset/Decoder.safetensors",
    "sha256_asset_DVAE_safetensors": "asset/DVAE.safetensors",
    "sha256_asset_Embed_safetensors": "asset/Embed.safetensors",
    "sha256_asset_Vocos_safetensors": "asset/Vocos.safetensors",
    "sha256_asset_gpt_config_json": "asset/gpt/config.json",
    "sha256_asset_gpt_model_safetensors": "asset/gpt/model.safetensors",
    "sha256_asset_tokenizer_special_tokens_map_json": "asset/tokenizer/special_tokens_map.json",
    "sha256_asset_tokenizer_tokenizer_config_json": "asset/tokenizer/tokenizer_config.json",
    "sha256_asset_tokenizer_tokenizer_json": "asset/tokenizer/tokenizer.json",
}

#: The control tags ChatTTS's tokenizer carries after the BERT vocabulary, in the real tokenizer's order.
CHATTTS_TAGS: tuple[str, ...] = (
    "[Sasr]", "[Pasr]", "[Easr]", "[Stts]", "[Ptts]", "[Etts]", "[Sbreak]", "[Pbreak]", "[Ebreak]", "[uv_break]",
    "[v_break]", "[lbreak]", "[llbreak]", "[undefine]", "[laugh]", "[spk_emb]", "[empty_spk]", "[music]", "[pure]",
    *(f"[break_{i}]" for i in range(8)),
    *(f"[laugh_{i}]" for i in range(3)),
    *(f"[oral_{i}]" for i in range(10)),
    *(f"[speed_{i}]" for i in range(10)),
)  # fmt: skip
_REAL_BASE_VOCAB = 21128  # BERT tokens before the tags in the real tokenizer
_TINY_HIDDEN = 32


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def config_from_dict(values: dict[str, Any], cls: type[Any] | None = None) -> Any:
    """Rebuild ChatTTS's nested ``Config`` dataclasses from ``asdict`` output, always as new objects.

    ChatTTS's nested defaults are shared class-level instances (``Config().gpt is Config().gpt``): never mutate them.
    """
    if cls is None:
        from ChatTTS.config import Config

        cls = Config
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name not in values:
            continue
        value = values[field.name]
        default = field.default if field.default is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default) and isinstance(value, dict):
            value = config_from_dict(value, type(default))
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[field.name] = value
    return cls(**kwargs)


def generate_assets(directory: Path, preset: str = "tiny", seed: int = 0) -> None:
    """Write a complete ChatTTS asset directory with random weights into ``directory`` (created if missing).

    Args:
        directory: Where to write; existing generated files are overwritten.
        preset: ``tiny`` for tests or ``full`` for ChatTTS's real dimensions.
        seed: Seeds the weight initialisation, so the same seed gives the same files.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")
    import torch

    torch.manual_seed(seed)
    asset = directory / "asset"
    asset.mkdir(parents=True, exist_ok=True)
    config = _model_config(preset)
    vocab_size = _write_tokenizer(asset / "tokenizer", preset)
    if preset == "tiny":
        config.gpt.num_text_tokens = config.embed.num_text_tokens = vocab_size
    with torch.no_grad():
        _write_weights(asset, config)
    (directory / CONFIG_FILE).write_text(json.dumps(dataclasses.asdict(config), indent=1, ensure_ascii=False))
    hashes = {key: sha256_file(directory / relative) for key, relative in ASSET_FILES.items()}
    (directory / HASH_FILE).write_text(json.dumps(hashes, indent=1))
    marker = {"generator": "tts-gateway", "preset": preset, "seed": seed, "weights": "random"}
    (directory / MARKER_FILE).write_text(json.dumps(marker, indent=1))


def _model_config(preset: str) -> Any:
    import numpy as np
    import pybase16384 as b14  # type: ignore[import-untyped]
    from ChatTTS.config import Config
    from ChatTTS.config.config import VQ, BackboneInitArgs, Decoder, FourierHeadInitArgs

    config = copy.deepcopy(Config())  # a private copy: the nested defaults are shared objects
    if preset == "full":
        return config  # real dimensions and the real speaker statistics
    hidden = _TINY_HIDDEN
    config.gpt.hidden_size = config.embed.hidden_size = hidden
    config.gpt.intermediate_size = 2 * hidden
    config.gpt.num_attention_heads = 2
    config.gpt.num_hidden_layers = 2  # two: with one, no later state depends on what attention sees
    # The decoder sees the GPT hidden state reshaped from (B, H, T) to (B, H/2, 2T).
    config.decoder = Decoder(idim=hidden // 2, odim=hidden // 2, hidden=16, n_layer=1, bn_dim=8)
    dvae_dim = 16  # the VQ levels stay (5, 5, 5, 5): 625 codes, and token 625 is EOS
    config.dvae.encoder = Decoder(idim=dvae_dim, odim=2 * dvae_dim, hidden=16, n_layer=1, bn_dim=8)
    config.dvae.decoder = Decoder(idim=dvae_dim, odim=dvae_dim, hidden=16, n_layer=1, bn_dim=8)
    config.dvae.vq = VQ(dim=2 * dvae_dim, levels=(5, 5, 5, 5), G=2, R=2)
    # Vocos keeps 100 mels, n_fft 1024 and hop 256 (24 kHz framing); only its widths shrink.
    config.vocos.backbone.init_args = BackboneInitArgs(input_channels=100, dim=32, intermediate_dim=64, num_layers=1)
    config.vocos.head.init_args = FourierHeadInitArgs(dim=32, n_fft=1024, hop_length=256, padding="center")
    # Speaker statistics: float16 [std..., mean...] of the hidden size, base16384-encoded as ChatTTS stores them.
    stat = np.concatenate([np.ones(hidden), np.zeros(hidden)]).astype(np.float16)
    config.spk_stat = b14.encode_to_string(stat.tobytes())
    return config


def _base_vocabulary(preset: str) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters, *"，。、？！,.?!'-", *(f"##{c}" for c in letters)]  # noqa: RUF001
    tokens += ["the", "hello", "world", "你", "好", "世", "界"]
    if preset == "full":  # English read at the real tokenizer's rate, and its base size, so that tag ids match
        tokens = list(dict.fromkeys([*tokens, *english_pieces()]))
        tokens += [f"[unused{i}]" for i in range(_REAL_BASE_VOCAB - len(tokens))]
    return tokens


def _write_tokenizer(directory: Path, preset: str) -> int:
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import BertTokenizerFast  # type: ignore[attr-defined]

    vocabulary = {token: index for index, token in enumerate(_base_vocabulary(preset))}
    backend = Tokenizer(models.WordPiece(vocabulary, unk_token="[UNK]"))  # noqa: S106
    backend.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    # Tags match verbatim: special and not normalised (never lower-cased or split).
    backend.add_special_tokens([AddedToken(tag, special=True, normalized=False) for tag in CHATTTS_TAGS])
    special = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
               "mask_token": "[MASK]"}  # fmt: skip
    tokenizer = BertTokenizerFast(tokenizer_object=backend, padding_side="left", **special)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(directory))
    special_tokens = directory / "special_tokens_map.json"
    if not special_tokens.exists():  # newer transformers no longer write it; ChatTTS's layout has it
        names = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
        special_tokens.write_text(json.dumps({name: getattr(tokenizer, name) for name in names}, indent=2))
    return len(tokenizer)


def _write_weights(asset: Path, config: Any) -> None:
    from ChatTTS.model import DVAE, Embed
    from transformers import LlamaConfig, LlamaModel
    from vocos import Vocos  # type: ignore[import-untyped]
    from vocos.pretrained import instantiate_class  # type: ignore[import-untyped]

    asdict = dataclasses.asdict
    vocos = Vocos(
        feature_extractor=instantiate_class((), asdict(config.vocos.feature_extractor)),
        backbone=instantiate_class((), asdict(config.vocos.backbone)),
        head=instantiate_class((), asdict(config.vocos.head)),
    )
    _save(vocos, asset / "Vocos.safetensors")
    dvae = DVAE(
        decoder_config=asdict(config.dvae.decoder), encoder_config=asdict(config.dvae.encoder),
        vq_config=asdict(config.dvae.vq), dim=config.dvae.decoder.idim,
    )  # fmt: skip
    _save(dvae, asset / "DVAE.safetensors")
    _save(DVAE(decoder_config=asdict(config.decoder), dim=config.decoder.idim), asset / "Decoder.safetensors")
    embed = config.embed
    embed_module = Embed(embed.hidden_size, embed.num_audio_tokens, embed.num_text_tokens, embed.num_vq)
    _save(embed_module, asset / "Embed.safetensors")
    gpt = config.gpt
    llama_config = LlamaConfig(
        hidden_size=gpt.hidden_size, intermediate_size=gpt.intermediate_size,
        num_attention_heads=gpt.num_attention_heads, num_key_value_heads=gpt.num_attention_heads,
        num_hidden_layers=gpt.num_hidden_layers, max_position_embeddings=gpt.max_position_embeddings,
        vocab_size=8,  # ChatTTS deletes the token embedding after loading; it embeds with Embed.safetensors
    )  # fmt: skip
    LlamaModel(llama_config).save_pretrained(str(asset / "gpt"))
    (asset / "gpt" / "generation_config.json").unlink(missing_ok=True)


def _save(module: Any, path: Path) -> None:
    from safetensors.torch import save_file

    state = {name: tensor.detach().cpu().contiguous().clone() for name, tensor in module.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path))
