"""The gateway's one settings object: environment variables (``CHATTTS_GATEWAY_*``, then the former ``TTS_GATEWAY_*``)
over YAML files over built-ins.

It composes the settings each part owns: ``engines.settings`` (engines), ``auth.settings`` (tenants, limits, JWTs);
the HTTP server, cache and realtime settings are the gateway's own.

Every field is documented in ``docs/configuration.md``; ``tests/unit/test_configuration_reference.py`` fails when
the two disagree.
"""

from __future__ import annotations

# The package's surface is its modules' surfaces, each declared once in its module's ``__all__``.
from gateway.settings import root, sections
from gateway.settings.root import *  # noqa: F403
from gateway.settings.sections import *  # noqa: F403
from gateway.settings.server import ServerSettings

__all__ = ["ServerSettings"]
__all__ += root.__all__
__all__ += sections.__all__
