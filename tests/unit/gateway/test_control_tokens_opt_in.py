"""ChatTTS's control tokens are read when the request opts in, or when its tenant does (``control_tokens`` in the
tenant's settings): the planner hands the engine that choice (``SynthesisRequest.control_tokens``, whose effect on
the token ids ChatTTS sees ``tests/unit/engines/test_chattts.py`` shows), for every engine an alias may fail over
to. The cache key follows the planned request (``tests/unit/gateway/text/test_ssml_speech.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from auth import Principal, Tenant
from auth.settings import TenantLimits, TenantSettings
from auth.tenants import tenant_from_settings
from engines.settings import engine_settings
from gateway.schemas import SpeechRequest
from gateway.speech.plan import Planner
from gateway.speech.routing import ModelRouter
from gateway.speech.voices import MemoryVoiceStore
from tests.inprocess import ThreadBackend

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@pytest.fixture(scope="module")
async def planner() -> AsyncIterator[Planner]:
    engines = {name: ThreadBackend(name, engine_settings(kind="synthetic")) for name in ("first", "second")}
    for engine in engines.values():
        await engine.start()
    yield Planner(ModelRouter(engines, {"both": ["first", "second"]}), MemoryVoiceStore())
    for engine in engines.values():
        await engine.stop()


def principal(*, opted_in: bool) -> Principal:
    tenant: Tenant = tenant_from_settings(TenantSettings(name="acme", control_tokens=opted_in))
    return Principal(tenant, "key")


@pytest.mark.parametrize(
    ("tenant_opted_in", "request_opted_in", "read"),
    [(False, False, False), (False, True, True), (True, False, True), (True, True, True)],
)
async def test_the_request_or_its_tenant_opts_in(
    planner: Planner, tenant_opted_in: bool, request_opted_in: bool, read: bool
) -> None:
    request = SpeechRequest(model="both", input="Ha [laugh] ha.", voice="alloy", control_tokens=request_opted_in)
    plan = await planner.plan(principal(opted_in=tenant_opted_in), request)
    assert plan.synthesis.control_tokens is read
    failover = plan.for_engine(planner.router.route("both").engines[1])
    assert failover is not None
    assert failover.synthesis.control_tokens is read  # the next engine of the alias is asked the same


def test_the_setting_is_off_by_default_and_kept_with_the_tenant() -> None:
    assert not tenant_from_settings(TenantSettings(name="acme")).control_tokens
    assert TenantSettings(name="acme", limits=TenantLimits(), control_tokens=True).control_tokens
