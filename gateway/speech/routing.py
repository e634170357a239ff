"""Model names to engine pools: engines by their own name, aliases to the engines of their list, best first.

Each engine that declares ``breaker_settings`` (the local ones) has a circuit breaker here; the failover layer
(``gateway/speech/failover.py``) asks it before each try and tells it how the try went.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from litestar.status_codes import HTTP_404_NOT_FOUND

from engines.breaker import BREAKER_STATE_CODES, CircuitBreaker
from gateway.http.errors import OpenAIError
from gateway.settings import AliasSettings, FailoverSettings

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from engines.backend import EngineBackend
    from engines.breaker import BreakerState

__all__ = ["ModelRouter", "Route"]


@dataclass(frozen=True, slots=True)
class Route:
    """The engines that may serve a model, best first, and whether an overloaded one may pass a request on."""

    engines: tuple[EngineBackend, ...]
    spill_on_overload: bool = False


class ModelRouter:
    """Resolves the ``model`` of a request to the engine pools that may serve it, and keeps their breakers."""

    def __init__(
        self,
        pools: Mapping[str, EngineBackend],
        aliases: Mapping[str, AliasSettings | Sequence[str]],
        failover: FailoverSettings | None = None,
    ) -> None:
        self.pools = dict(pools)
        self.aliases = {name: _as_alias(alias) for name, alias in aliases.items()}
        self.failover = failover or FailoverSettings()
        self.breakers = {
            name: CircuitBreaker(settings)
            for name, pool in self.pools.items()
            if (settings := pool.breaker_settings) is not None
        }

    def model_names(self) -> list[str]:
        return [*self.aliases, *self.pools]

    def resolve(self, model: str) -> EngineBackend:
        """The pool that should serve ``model`` now (the first of :meth:`route`).

        Raises:
            OpenAIError: 404 when no engine or alias has this name.
        """
        return self.route(model).engines[0]

    def route(self, model: str) -> Route:
        """The engines of ``model``, best first: for an alias, the ready ones whose breaker is not open (in the
        alias's order), then those still starting, then the rest (which answer with the reason they cannot serve).

        Raises:
            OpenAIError: 404 when no engine or alias has this name.
        """
        if model in self.pools:
            return Route((self.pools[model],))
        alias = self.aliases.get(model)
        if alias is None:
            message = f"The model `{model}` does not exist or you do not have access to it."
            raise OpenAIError(HTTP_404_NOT_FOUND, message, param="model", code="model_not_found")
        candidates = [self.pools[name] for name in alias.engines]
        candidates.sort(key=self._preference)  # stable: the alias's order within each rank
        return Route(tuple(candidates), alias.spill_on_overload)

    def breaker_state(self, engine: str) -> BreakerState | None:
        """The state of ``engine``'s breaker; ``None`` for a remote engine (it keeps one per endpoint)."""
        breaker = self.breakers.get(engine)
        return breaker.state if breaker is not None else None

    def breaker_codes(self) -> dict[str, int]:
        """Each breaker's state as the ``tts_engine_breaker_state`` gauge shows it: 0 closed, 1 half-open, 2 open."""
        return {name: BREAKER_STATE_CODES[breaker.state] for name, breaker in self.breakers.items()}

    def _preference(self, pool: EngineBackend) -> int:
        state = pool.status().state
        if state == "ready":
            return 1 if self.breaker_state(pool.name) == "open" else 0
        return 2 if state == "starting" else 3


def _as_alias(alias: AliasSettings | Sequence[str]) -> AliasSettings:
    return alias if isinstance(alias, AliasSettings) else AliasSettings(engines=list(alias))
