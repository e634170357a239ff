"""What each tenant holds of one replica's connections: a limit per tenant, and a fair share when it is crowded."""

from __future__ import annotations

import pytest

from auth.limits import HeldConnections, RateLimitExceededError


def test_a_tenant_holds_at_most_its_bodies_on_a_replica() -> None:
    held = HeldConnections(capacity=1000)
    releases = [held.take("acme", "bodies", limit=2) for _ in range(2)]
    with pytest.raises(RateLimitExceededError) as refused:
        held.take("acme", "bodies", limit=2)
    assert (refused.value.reason, refused.value.retry_after_s) == ("bodies", 1)
    held.take("acme", "sessions")  # another kind, and another tenant, are not held by it
    held.take("other", "bodies", limit=2)
    releases[0]()
    releases[0]()  # once only
    assert held.held("acme", "bodies") == 1
    held.take("acme", "bodies", limit=2)


def test_a_crowded_replica_refuses_a_tenant_over_its_fair_share_not_one_under_it() -> None:
    held = HeldConnections(capacity=10)  # crowded from 8 held
    greedy = [held.take("greedy", "sessions") for _ in range(9)]  # alone, it is held by its own limits only
    for _ in range(4):  # two tenants now: 4 each; the newcomer under its share gets in though the replica is crowded
        held.take("modest", "bodies")
    assert held.fair_share("modest") == 4
    for tenant in ("modest", "greedy"):  # at its share, and far over it
        with pytest.raises(RateLimitExceededError) as refused:
            held.take(tenant, "bodies")
        assert refused.value.reason == "fair_share"
    for release in greedy[:6]:
        release()
    held.take("greedy", "sessions")  # 3 + 4 held: no longer crowded
    assert (held.held("greedy"), held.held("modest")) == (4, 4)
