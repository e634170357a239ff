"""Settings: defaults, YAML file, environment variables over the file, and loud rejection of mistakes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from engines.settings import EspeakEngineSettings, SyntheticEngineSettings
from gateway.cli import build_parser
from gateway.settings import Settings, load_settings

CONFIG = """
server: {port: 9100, log_level: warning}
engines:
  tones: {kind: synthetic, workers: 3, options: {rtf: 0.5}}
  espeak: {kind: espeak}
aliases:
  tts-1: [tones, espeak]
"""


def test_defaults_serve_espeak_behind_the_openai_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith(("CHATTTS_GATEWAY_", "TTS_GATEWAY_"))]:
        monkeypatch.delenv(name)
    settings = load_settings()
    assert settings.server.port == 8000
    assert settings.engines["espeak"].kind == "espeak"
    assert settings.aliases["tts-1"].engines == ["chattts", "espeak"]


def test_yaml_file_then_environment_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG)
    monkeypatch.setenv("CHATTTS_GATEWAY_SERVER__PORT", "9200")
    settings = load_settings(config)
    assert settings.server.port == 9200
    assert settings.server.log_level == "warning"
    tones = settings.engines["tones"]
    assert isinstance(tones, SyntheticEngineSettings)
    assert tones.workers == 3
    assert tones.options.rtf == 0.5
    assert settings.aliases["tts-1"].engines == ["tones", "espeak"]
    assert settings.aliases["tts-1-hd"].engines == ["chattts", "espeak"]  # built-ins the file does not name stay


@pytest.mark.parametrize(
    "bad",
    [
        {"engines": {"x": {"kind": "nope"}}},
        {"engines": {"x": {"kind": "espeak", "workerz": 2}}},
        {"engines": {"x": {"kind": "espeak", "workers": 0}}},
        {"aliases": {"tts-1": ["missing-engine"]}},
        {"aliases": {"espeak": ["espeak"]}},
        {"surprise": True},
    ],
)
def test_mistakes_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings(**bad)  # type: ignore[arg-type]


def test_serve_refuses_a_bad_config_file_with_a_message(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("engines: {x: {kind: nope}}\n")
    script = Path(sys.executable).with_name("chattts-gateway")
    result = subprocess.run(
        [script, "serve", "--config", str(config)], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "invalid configuration" in result.stderr
    missing = subprocess.run(
        [script, "serve", "--config", str(tmp_path / "none.yaml")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2
    assert "not found" in missing.stderr


def test_later_config_files_deep_merge_over_earlier_ones(tmp_path: Path) -> None:
    # The Helm chart mounts a ConfigMap file and a Secret file: tenants and tokens come from the second.
    public = tmp_path / "config.yaml"
    public.write_text("auth: {required: true}\nengines: {tones: {kind: synthetic}}\naliases: {}\n")
    secret = tmp_path / "secret.yaml"
    secret.write_text("auth: {admin_token: s3cret-s3cret-s3cret-s3cret-s3cret-0, tenants: [{name: acme}]}\n")
    settings = load_settings([public, secret])
    assert settings.auth.required is True
    assert [t.name for t in settings.auth.tenants] == ["acme"]
    assert settings.auth.admin_token is not None
    assert settings.auth.admin_token.get_secret_value() == "s3cret-s3cret-s3cret-s3cret-s3cret-0"
    with pytest.raises(ValidationError, match="no tenants"):
        load_settings([public])


def test_environment_variables_merge_into_the_built_in_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    # The README's way to point ChatTTS at weights: only what changes is named, `kind` comes from the built-in.
    monkeypatch.setenv("CHATTTS_GATEWAY_ENGINES__CHATTTS__OPTIONS__SOURCE", "dir")
    monkeypatch.setenv("CHATTTS_GATEWAY_ENGINES__CHATTTS__OPTIONS__PATH", "/models/chattts")
    monkeypatch.setenv("CHATTTS_GATEWAY_ENGINES__CHATTTS__OPTIONS__MAX_BATCH", "8")
    monkeypatch.setenv("CHATTTS_GATEWAY_ENGINES__ESPEAK__WORKERS", "2")
    monkeypatch.setenv("CHATTTS_GATEWAY_ENGINES__ESPEAK__OPTIONS__CHUNK_MS", "50")
    settings = load_settings()
    chattts, espeak = settings.engines["chattts"], settings.engines["espeak"]
    assert chattts.kind == "chattts" and espeak.kind == "espeak"
    assert (chattts.options.source, chattts.options.path, chattts.options.max_batch) == ("dir", "/models/chattts", 8)
    assert (espeak.workers, espeak.options.chunk_ms) == (2, 50)


@pytest.mark.parametrize("prefix", ["CHATTTS_GATEWAY_", "TTS_GATEWAY_"])
def test_the_former_environment_prefix_still_configures_the_server(
    prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A deployment's environment written for tts-gateway keeps working (docs/configuration.md, Former names).
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG)
    monkeypatch.setenv(f"{prefix}SERVER__PORT", "9300")
    monkeypatch.setenv(f"{prefix}ENGINES__ESPEAK__WORKERS", "3")
    settings = load_settings(config)
    espeak = settings.engines["espeak"]
    assert espeak.kind == "espeak"
    assert (settings.server.port, espeak.workers) == (9300, 3)
    assert settings.engines["tones"].kind == "synthetic"  # the file's engines still merge in


def test_the_new_environment_prefix_wins_over_the_former_one_key_by_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TTS_GATEWAY_SERVER__PORT", "9400")
    monkeypatch.setenv("CHATTTS_GATEWAY_SERVER__PORT", "9500")
    monkeypatch.setenv("TTS_GATEWAY_SERVER__LOG_LEVEL", "debug")  # named under the former prefix only
    settings = load_settings()
    assert (settings.server.port, settings.server.log_level) == (9500, "debug")


def test_serve_reads_its_config_files_from_either_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = tmp_path / "old.yaml", tmp_path / "new.yaml"
    monkeypatch.setenv("TTS_GATEWAY_CONFIG", str(old))
    assert build_parser().parse_args(["serve"]).config_default == [old]
    monkeypatch.setenv("CHATTTS_GATEWAY_CONFIG", str(new))
    assert build_parser().parse_args(["serve"]).config_default == [new]


@pytest.mark.parametrize("how", ["yaml", "env"])
def test_max_batch_auto_may_be_written_out(how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the bounds of the number were applied to ``auto`` as well, so a configuration that named the default
    stopped the start with a TypeError from pydantic."""
    config = tmp_path / "auto.yaml"
    config.write_text("engines: {chattts: {options: {max_batch: auto}}}\n" if how == "yaml" else "{}\n")
    if how == "env":
        monkeypatch.setenv("CHATTTS_GATEWAY_ENGINES__CHATTTS__OPTIONS__MAX_BATCH", "auto")
    chattts = load_settings(config).engines["chattts"]
    assert chattts.kind == "chattts"
    assert chattts.options.max_batch == "auto"


def test_a_file_with_one_alias_keeps_the_built_in_ones(tmp_path: Path) -> None:
    config = tmp_path / "aliases.yaml"
    config.write_text("aliases: {x: [chattts, espeak]}\n")
    aliases = load_settings(config).aliases
    assert aliases["x"].engines == ["chattts", "espeak"]
    assert {
        "tts-1",
        "tts-1-hd",
        "gpt-4o-mini-tts",
        "gpt-4o-mini-tts-2025-12-15",
        "gpt-4o-mini-tts-2025-03-20",
        "tts-1-1106",
        "tts-1-hd-1106",
    } <= set(aliases)


@pytest.mark.parametrize("how", ["yaml", "env"])
def test_null_removes_a_built_in_engine_and_its_aliases_follow(
    how: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "remove.yaml"
    config.write_text("engines: {chattts: null}\n" if how == "yaml" else "{}\n")
    if how == "env":
        monkeypatch.setenv("CHATTTS_GATEWAY_ENGINES__CHATTTS", "null")
    settings = load_settings(config)
    assert set(settings.engines) == {"espeak"}
    assert settings.aliases["tts-1"].engines == ["espeak"]


def test_an_alias_of_ones_own_must_still_name_engines_that_exist(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("engines: {chattts: null}\naliases: {tts-1: [chattts]}\n")
    with pytest.raises(ValidationError, match="unknown \\['chattts'\\]"):
        load_settings(config)


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("CHATTTS_GATEWAY_ENGINES__CHATTTS__OPTIONS__MAX_BATCHH", "8", "max_batchh"),
        ("CHATTTS_GATEWAY_ENGINES__CHATTTS__OPTIONS__MAX_BATCH", "lots", "max_batch"),
        ("CHATTTS_GATEWAY_ENGINES__CHATTTS__OPTIONS__MAX_BATCH", "0", "max_batch"),
        ("CHATTTS_GATEWAY_ENGINES__CHATTTS__OPTIONS__MAX_BATCH", "65", "max_batch"),
        ("CHATTTS_GATEWAY_ENGINES__ESPEAK__OPTIONS__CHUNK_MS", "5", "chunk_ms"),
        ("CHATTTS_GATEWAY_ENGINES__CHATTTS__OPTIONS__SOURCE", "ftp", "source"),
    ],
)
def test_a_bad_engine_option_stops_the_start_naming_it(
    variable: str,
    value: str,
    named: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Validated when the settings load, before any worker exists: never a silently unavailable engine.
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as refused:
        load_settings()
    assert any(named in str(error["loc"]) for error in refused.value.errors()), refused.value


def test_a_built_in_engine_redefined_as_another_kind_takes_none_of_the_built_ins_settings(tmp_path: Path) -> None:
    """Before: the built-in espeak's ``low_priority_workers`` merged into a front tier's ``espeak`` of ``kind:
    openai``, which takes no such setting, and the gateway refused to start."""
    config = tmp_path / "front.yaml"
    config.write_text(
        "engines:\n"
        "  espeak: {kind: openai, options: {endpoints: ['http://node:8000/v1'], model: espeak}}\n"
        "  chattts: {kind: synthetic}\n"
    )
    settings = load_settings(config)
    espeak, chattts = settings.engines["espeak"], settings.engines["chattts"]
    assert espeak.kind == "openai"
    assert not hasattr(espeak, "low_priority_workers")
    assert chattts.kind == "synthetic"
    built_in = load_settings().engines["espeak"]
    assert isinstance(built_in, EspeakEngineSettings)
    assert built_in.low_priority_workers == 1  # the built-in keeps its jobs' worker


def test_an_espeak_of_another_local_kind_keeps_what_its_kind_takes(tmp_path: Path) -> None:
    config = tmp_path / "tones.yaml"
    config.write_text("engines: {espeak: {kind: synthetic, workers: 2}}\n")
    espeak = load_settings(config).engines["espeak"]
    assert isinstance(espeak, SyntheticEngineSettings)
    assert (espeak.workers, espeak.low_priority_workers) == (2, 1)
