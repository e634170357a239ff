"""Model names to engine pools: engines by their own name, aliases to the engines of their list, best first.

An alias with ``fallback`` routes to the engines of its list, best first; one without it, to its first engine only
(a request then gets that engine's 503 while it is not ready, never another engine's voice). Every answer by another
engine than an alias's first is counted (``tts_alias_fallbacks_total``); an alias starting or stopping to fall back
is logged once. The router also says what ``/readyz`` waits for (:meth:`ModelRouter.requirements`).

Each engine that declares ``breaker_settings`` (the local ones) has a circuit breaker here; the failover layer
(``gateway/speech/failover.py``) asks it before each try and tells it how the try went.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engines.breaker import BREAKER_STATE_CODES, CircuitBreaker
from gateway.schemas import BuiltInVoice
from gateway.settings import AliasSettings, FailoverSettings, ReadinessSettings
from gateway.speech.errors import UnknownModelError
from lifecycle import naming

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from prometheus_client import Counter

    from auth import Tenant
    from engines.backend import EngineBackend
    from engines.breaker import BreakerState

__all__ = ["ModelRouter", "Route"]

logger = naming.logger("routing")


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
        *,
        readiness: ReadinessSettings | None = None,
        fallbacks: Counter | None = None,
    ) -> None:
        self.pools = dict(pools)
        self.aliases = {name: _as_alias(alias) for name, alias in aliases.items()}
        self.failover = failover or FailoverSettings()
        self.readiness = readiness or ReadinessSettings()
        self.breakers = {
            name: CircuitBreaker(settings)
            for name, pool in self.pools.items()
            if (settings := pool.breaker_settings) is not None
        }
        self._fallbacks = fallbacks
        self._answering: dict[str, str] = {}
        """The engine answering each alias that fell back (its first could not serve): what the log follows."""

    def model_names(self) -> list[str]:
        return [*self.aliases, *self.pools]

    def model_names_for(self, tenant: Tenant) -> list[str]:
        """The model names ``tenant`` may use: the models every API family lists to it."""
        return [name for name in self.model_names() if tenant.allows_model(name)]

    def builtin_voices(self, models: Iterable[str]) -> list[BuiltInVoice]:
        """The voices the engines of ``models`` have built in (those loaded), each with the models of ``models`` that
        speak it: what every API family lists as its built-in voices."""
        by_voice: dict[str, BuiltInVoice] = {}
        for model in models:
            info = self.resolve(model).info
            for voice in info.voices if info is not None else ():
                entry = by_voice.setdefault(
                    voice.id, BuiltInVoice(id=voice.id, name=voice.id, description=voice.description, models=[])
                )
                entry.models.append(model)
        return list(by_voice.values())

    def resolve(self, model: str) -> EngineBackend:
        """The pool that should serve ``model`` now (the first of :meth:`route`).

        Raises:
            UnknownModelError: no engine or alias has this name.
        """
        return self.route(model).engines[0]

    def route(self, model: str) -> Route:
        """The engines of ``model``, best first: for an alias with ``fallback``, the ready ones whose breaker is not
        open (in the alias's order), then those still starting, then the rest (which answer with the reason they
        cannot serve); for one without, its first engine alone, whatever its state.

        Raises:
            UnknownModelError: no engine or alias has this name.
        """
        if model in self.pools:
            return Route((self.pools[model],))
        alias = self.aliases.get(model)
        if alias is None:
            raise UnknownModelError(model)
        if not alias.fallback:
            return Route((self.pools[alias.engines[0]],))
        candidates = [self.pools[name] for name in alias.engines]
        candidates.sort(key=self._preference)  # stable: the alias's order within each rank
        return Route(tuple(candidates), alias.spill_on_overload)

    def record_answer(self, model: str, engine: str) -> None:
        """``engine`` answered a request (or a realtime segment) for ``model``: an alias answered by another engine
        than its first counts in ``tts_alias_fallbacks_total``; a change of the engine answering it while its first
        cannot serve is logged, once (a log line per request would bury the one that says when the voice changed)."""
        alias = self.aliases.get(model)
        if alias is None:
            return
        first = alias.engines[0]
        if engine != first and self._fallbacks is not None:
            self._fallbacks.labels(model, engine).inc()
        if self._answering.get(model, first) == engine:
            return
        if engine == first:
            del self._answering[model]
            logger.info("alias %s is served by its first engine %s again", model, first)
        elif (why := self._cannot_serve(first)) is not None:
            self._answering[model] = engine
            logger.warning("alias %s falls back to engine %s: its first engine %s %s", model, engine, first, why)
        # Else the first engine can serve: a spill or a retry past it, counted but no change of state (a realtime
        # session that fell back keeps its engine, and logging each of its segments would flap with the HTTP answers).

    def requirements(self) -> dict[str, tuple[str, ...]]:
        """What ``/readyz`` waits for: each model name that must be answerable, with the engines of which one must be
        ready. ``readiness.engines`` when set (each by its own name); else every alias (its first engine, or any of
        its engines with ``fallback``); with no alias, every engine. An engine in no alias is not required when there
        are aliases: one kept for experiments must not take the gateway out of service."""
        if self.readiness.engines is not None:
            return {name: (name,) for name in self.readiness.engines}
        if not self.aliases:
            return {name: (name,) for name in self.pools}
        return {
            name: tuple(alias.engines) if alias.fallback else (alias.engines[0],)
            for name, alias in self.aliases.items()
        }

    def breaker_state(self, engine: str) -> BreakerState | None:
        """The state of ``engine``'s breaker; ``None`` for a remote engine (it keeps one per endpoint)."""
        breaker = self.breakers.get(engine)
        return breaker.state if breaker is not None else None

    def breaker_codes(self) -> dict[str, int]:
        """Each breaker's state as the ``tts_engine_breaker_state`` gauge shows it: 0 closed, 1 half-open, 2 open."""
        return {name: BREAKER_STATE_CODES[breaker.state] for name, breaker in self.breakers.items()}

    def _cannot_serve(self, engine: str) -> str | None:
        """Why ``engine`` cannot take requests now (not ready, breaker open), for the fallback log; ``None`` when it
        can."""
        status = self.pools[engine].status()
        if status.state != "ready":
            return f"is {status.state}" + (f" ({status.reason})" if status.reason else "")
        return "has its breaker open" if self.breaker_state(engine) == "open" else None

    def _preference(self, pool: EngineBackend) -> int:
        state = pool.status().state
        if state == "ready":
            return 1 if self.breaker_state(pool.name) == "open" else 0
        return 2 if state == "starting" else 3


def _as_alias(alias: AliasSettings | Sequence[str]) -> AliasSettings:
    return alias if isinstance(alias, AliasSettings) else AliasSettings(engines=list(alias))
