"""Fixtures shared by the limits' contract suite and its Redis-only tests."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from tests.auth_backends import Limiters

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@pytest.fixture
async def make_limiter() -> AsyncIterator[Limiters]:
    limiters = Limiters()
    yield limiters
    await limiters.close()


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"
