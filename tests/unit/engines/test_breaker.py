"""The circuit breaker's state machine, driven by a fake clock (no sleeps)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engines.breaker import BreakerSettings, CircuitBreaker


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_breaker(clock: FakeClock, **fields: float) -> CircuitBreaker:
    return CircuitBreaker(BreakerSettings.model_validate(fields), clock=clock)


def state_of(breaker: CircuitBreaker) -> str:
    """The state, read through a call so mypy does not narrow the property across calls that change it."""
    return breaker.state


def open_breaker(breaker: CircuitBreaker) -> None:
    for _ in range(breaker.settings.failures):
        breaker.record_failure()
    assert state_of(breaker) == "open"


def test_closed_allows_everything_and_opens_after_n_failures(clock: FakeClock) -> None:
    breaker = make_breaker(clock, failures=3)
    assert state_of(breaker) == "closed"
    for _ in range(2):
        breaker.record_failure()
        assert breaker.allow()
    assert state_of(breaker) == "closed"
    breaker.record_failure()
    assert state_of(breaker) == "open"
    assert not breaker.allow()


def test_failures_outside_the_window_do_not_count(clock: FakeClock) -> None:
    breaker = make_breaker(clock, failures=3, window_s=10)
    breaker.record_failure()
    breaker.record_failure()
    clock.advance(10.5)
    breaker.record_failure()
    assert state_of(breaker) == "closed"
    breaker.record_failure()
    assert state_of(breaker) == "closed"
    breaker.record_failure()
    assert state_of(breaker) == "open"


def test_successes_in_closed_state_do_not_reset_the_window(clock: FakeClock) -> None:
    breaker = make_breaker(clock, failures=2)
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert state_of(breaker) == "open"


def test_open_refuses_until_open_s_then_half_opens(clock: FakeClock) -> None:
    breaker = make_breaker(clock, failures=1, open_s=5)
    open_breaker(breaker)
    clock.advance(4.9)
    assert not breaker.allow()
    assert breaker.open_remaining_s == pytest.approx(0.1)
    clock.advance(0.1)
    assert state_of(breaker) == "half_open"
    assert breaker.open_remaining_s == 0.0


def test_half_open_allows_only_the_configured_trials(clock: FakeClock) -> None:
    breaker = make_breaker(clock, failures=1, open_s=1, half_open_probes=2)
    open_breaker(breaker)
    clock.advance(1)
    assert breaker.allow()
    assert breaker.allow()
    assert not breaker.allow()
    assert state_of(breaker) == "half_open"


def test_half_open_success_closes_and_forgets_failures(clock: FakeClock) -> None:
    breaker = make_breaker(clock, failures=2, open_s=1)
    open_breaker(breaker)
    clock.advance(1)
    assert breaker.allow()
    breaker.record_success()
    assert state_of(breaker) == "closed"
    breaker.record_failure()
    assert state_of(breaker) == "closed", "one failure after closing must not reopen a breaker that needs two"


def test_half_open_failure_reopens_for_another_open_s(clock: FakeClock) -> None:
    breaker = make_breaker(clock, failures=1, open_s=3)
    open_breaker(breaker)
    clock.advance(3)
    assert breaker.allow()
    breaker.record_failure()
    assert state_of(breaker) == "open"
    clock.advance(2.9)
    assert not breaker.allow()
    clock.advance(0.1)
    assert breaker.allow()


def test_released_trial_frees_its_slot(clock: FakeClock) -> None:
    breaker = make_breaker(clock, failures=1, open_s=1)
    open_breaker(breaker)
    clock.advance(1)
    assert breaker.allow()
    assert not breaker.allow()
    breaker.release()
    assert breaker.allow()


def test_late_failure_while_open_does_not_extend_it(clock: FakeClock) -> None:
    breaker = make_breaker(clock, failures=1, open_s=2)
    open_breaker(breaker)
    clock.advance(1.5)
    breaker.record_failure()
    clock.advance(0.5)
    assert state_of(breaker) == "half_open"


def test_late_success_while_open_does_not_close_it(clock: FakeClock) -> None:
    breaker = make_breaker(clock, failures=1, open_s=2)
    open_breaker(breaker)
    breaker.record_success()
    assert state_of(breaker) == "open"


def test_defaults_and_validation() -> None:
    settings = BreakerSettings()
    assert (settings.failures, settings.window_s, settings.open_s, settings.half_open_probes) == (5, 30.0, 10.0, 1)
    with pytest.raises(ValidationError, match="extra"):
        BreakerSettings.model_validate({"failure": 3})
    with pytest.raises(ValidationError):
        BreakerSettings(failures=0)
