"""The product's one name, in each form a deployment meets it, and the names it had before that still work.

The project was called tts-gateway; ``chattts-gateway`` is its name everywhere now (package, command, chart, loggers,
environment). What a running deployment is configured or watched by keeps working under its former name: environment
variables prefixed ``TTS_GATEWAY_`` (the new prefix wins when both are set), the ``tts_*`` metrics, the keys in Redis
and the asset manifest ``tts-gateway-assets.json``. docs/configuration.md has the table.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ENV_PREFIX", "FORMER_ENV_PREFIX", "LOGGER_ROOT", "environ", "logger"]

#: The root of every logger of the gateway, its engines and stores: ``chattts_gateway.<part>``.
LOGGER_ROOT = "chattts_gateway"
#: The settings' environment variables: ``CHATTTS_GATEWAY_SERVER__PORT=9000``.
ENV_PREFIX = "CHATTTS_GATEWAY_"
#: The former prefix, still read beneath :data:`ENV_PREFIX` so that a deployment's environment keeps working.
FORMER_ENV_PREFIX = "TTS_GATEWAY_"


def logger(part: str | None = None) -> logging.Logger:
    """The logger of one part (``logger("cache")`` is ``chattts_gateway.cache``), or the root of them all."""
    return logging.getLogger(LOGGER_ROOT if part is None else f"{LOGGER_ROOT}.{part}")


def environ(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The variable ``CHATTTS_GATEWAY_<name>``, else its former ``TTS_GATEWAY_<name>``, else None."""
    values = os.environ if env is None else env
    value = values.get(ENV_PREFIX + name)
    return value if value is not None else values.get(FORMER_ENV_PREFIX + name)
