"""Settings: defaults, YAML file, environment variables over the file, and loud rejection of mistakes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

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
    for name in [n for n in os.environ if n.startswith("TTS_GATEWAY_")]:
        monkeypatch.delenv(name)
    settings = load_settings()
    assert settings.server.port == 8000
    assert settings.engines["espeak"].kind == "espeak"
    assert settings.aliases["tts-1"] == ["chattts", "espeak"]


def test_yaml_file_then_environment_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(CONFIG)
    monkeypatch.setenv("TTS_GATEWAY_SERVER__PORT", "9200")
    settings = load_settings(config)
    assert settings.server.port == 9200
    assert settings.server.log_level == "warning"
    assert settings.engines["tones"].workers == 3
    assert settings.engines["tones"].options.rtf == 0.5
    assert settings.aliases["tts-1"] == ["tones", "espeak"]
    assert settings.aliases["tts-1-hd"] == ["chattts", "espeak"]  # built-ins the file does not name stay


@pytest.mark.parametrize("bad", [
    {"engines": {"x": {"kind": "nope"}}},
    {"engines": {"x": {"kind": "espeak", "workerz": 2}}},
    {"engines": {"x": {"kind": "espeak", "workers": 0}}},
    {"aliases": {"tts-1": ["missing-engine"]}},
    {"aliases": {"espeak": ["espeak"]}},
    {"surprise": True},
])
def test_mistakes_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings(**bad)  # type: ignore[arg-type]


def test_serve_refuses_a_bad_config_file_with_a_message(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("engines: {x: {kind: nope}}\n")
    script = Path(sys.executable).with_name("tts-gateway")
    result = subprocess.run([script, "serve", "--config", str(config)], check=False, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 2
    assert "invalid configuration" in result.stderr
    missing = subprocess.run([script, "serve", "--config", str(tmp_path / "none.yaml")], check=False,
                             capture_output=True, text=True, timeout=60)
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
