"""Model names to engine pools: engines by their own name, aliases to the first ready engine of their list."""

from __future__ import annotations

from typing import TYPE_CHECKING

from litestar.status_codes import HTTP_404_NOT_FOUND

from gateway.http.errors import OpenAIError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from engines.backend import EngineBackend

__all__ = ["ModelRouter"]


class ModelRouter:
    """Resolves the ``model`` of a request to the engine pool that serves it."""

    def __init__(self, pools: Mapping[str, EngineBackend], aliases: Mapping[str, Sequence[str]]) -> None:
        self.pools = dict(pools)
        self.aliases = {name: tuple(targets) for name, targets in aliases.items()}

    def model_names(self) -> list[str]:
        return [*self.aliases, *self.pools]

    def resolve(self, model: str) -> EngineBackend:
        """The pool for ``model``: for an alias, the first ready engine, else the first one still starting.

        Raises:
            OpenAIError: 404 when no engine or alias has this name.
        """
        if model in self.pools:
            return self.pools[model]
        targets = self.aliases.get(model)
        if targets is None:
            message = f"The model `{model}` does not exist or you do not have access to it."
            raise OpenAIError(HTTP_404_NOT_FOUND, message, param="model", code="model_not_found")
        candidates = [self.pools[name] for name in targets]
        for wanted in ("ready", "starting"):
            for pool in candidates:
                if pool.status().state == wanted:
                    return pool
        return candidates[0]  # none can serve: its pool raises EngineNotReadyError with the reason
