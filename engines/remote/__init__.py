"""``kind: openai``: engines served by upstream servers that speak OpenAI's speech API (see ``backend``)."""

from engines.remote.options import OpenAIRemoteOptions

__all__ = ["OpenAIRemoteOptions"]
