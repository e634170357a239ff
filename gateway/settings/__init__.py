"""The gateway's one settings object: environment variables (``CHATTTS_GATEWAY_*``, then the former ``TTS_GATEWAY_*``)
over YAML files over built-ins.

It composes the settings each part owns: ``engines.settings`` (engines), ``auth.settings`` (tenants, limits, JWTs);
the HTTP server, cache and realtime settings are the gateway's own.

Every field is documented in ``docs/configuration.md``; ``tests/unit/test_configuration_reference.py`` fails when
the two disagree.
"""

from __future__ import annotations

from gateway.settings.root import (
    BUILT_IN_ALIASES,
    BUILT_IN_ENGINES,
    BUILT_IN_MODEL_NAMES,
    ELEVENLABS_MODEL_NAMES,
    OPENAI_MODEL_NAMES,
    Settings,
    load_settings,
)
from gateway.settings.sections import (
    AliasSettings,
    CacheSettings,
    FailoverSettings,
    JobsSettings,
    PronunciationSettings,
    ReadinessSettings,
    RealtimeSettings,
    SpeechSettings,
    VoicesSettings,
)
from gateway.settings.server import ServerSettings

__all__ = [
    "BUILT_IN_ALIASES",
    "BUILT_IN_ENGINES",
    "BUILT_IN_MODEL_NAMES",
    "ELEVENLABS_MODEL_NAMES",
    "OPENAI_MODEL_NAMES",
    "AliasSettings",
    "CacheSettings",
    "FailoverSettings",
    "JobsSettings",
    "PronunciationSettings",
    "ReadinessSettings",
    "RealtimeSettings",
    "ServerSettings",
    "Settings",
    "SpeechSettings",
    "VoicesSettings",
    "load_settings",
]
