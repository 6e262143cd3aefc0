"""Rate limiters (one limiter, per key, several limits at once) with the
sync client against a real latchkey."""

from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Dict, List

import pytest
from helpers import run_async

import latchkey
from latchkey import Limit, NotFound, RateLimited

Names = Callable[..., str]


def test_configure_acquire_and_a_refusal_with_retry_after(lk: latchkey.Client, name: Names) -> None:
    limiter = lk.rate_limiter(name("rl"))
    config = limiter.configure(rate=2, per_ms=1000)
    assert (config["rate"], config["per_ms"], config["burst"], config["available"]) == (2, 1000, 2, 2)
    assert limiter.acquire() == {"permits": 1, "available": 1}
    assert limiter.acquire() == {"permits": 1, "available": 0}
    with pytest.raises(RateLimited) as refused:
        limiter.acquire()
    assert isinstance(refused.value, latchkey.NotAcquired)
    assert refused.value.status == 429 and refused.value.slug == "rate-limited"
    assert refused.value.retry_after_ms is not None and 0 < refused.value.retry_after_ms <= 500
    assert refused.value.available == 0
    assert limiter.state()["available"] == 0


def test_a_wait_is_admitted_when_the_permit_is_due(lk: latchkey.Client, name: Names) -> None:
    limiter = lk.rate_limiter(name("rlwait"))
    limiter.configure(rate=2, per_ms=1000, burst=1)
    limiter.acquire()
    with pytest.raises(RateLimited) as refused:
        limiter.acquire(wait_ms=50)  # the permit comes later than that: refused at once
    due_ms = refused.value.retry_after_ms
    assert due_ms is not None and due_ms > 50
    started = time.monotonic()
    assert limiter.acquire(wait_ms=5_000) == {"permits": 1, "available": 0}
    # Admitted when the permit was due, not before.
    assert time.monotonic() - started >= (due_ms - 100) / 1000


def test_an_idempotent_acquire_counts_once(lk: latchkey.Client, name: Names) -> None:
    limiter = lk.rate_limiter(name("rlidem"))
    limiter.configure(rate=5, per_ms=60_000)
    key = uuid.uuid4().hex
    first = limiter.acquire(2, idempotency_key=key)
    assert limiter.acquire(2, idempotency_key=key) == first == {"permits": 2, "available": 3}
    assert limiter.state()["available"] == 3


def test_an_unconfigured_or_deleted_limiter_is_not_found(lk: latchkey.Client, name: Names) -> None:
    limiter = lk.rate_limiter(name("rlnone"))
    with pytest.raises(NotFound):
        limiter.acquire()
    limiter.configure(rate=1, per_ms=1000)
    assert limiter.delete() is True
    with pytest.raises(NotFound):
        limiter.state()


def test_more_permits_than_the_burst_are_out_of_range(lk: latchkey.Client, name: Names) -> None:
    limiter = lk.rate_limiter(name("rlburst"))
    limiter.configure(rate=1, per_ms=1000)
    with pytest.raises(latchkey.OutOfRange) as refused:
        limiter.acquire(2, wait_ms=10_000)
    assert refused.value.maximum == 1


def test_each_key_has_its_own_bucket(lk: latchkey.Client, name: Names) -> None:
    limiter = lk.rate_limiter(name("rlkey"))
    limiter.configure(rate=2, per_ms=60_000)
    assert limiter.acquire(2, key="user-1") == {"permits": 2, "available": 0}
    with pytest.raises(RateLimited):
        limiter.acquire(key="user-1")
    # Another key, and the shared bucket, are untouched.
    assert limiter.acquire(key="user-2") == {"permits": 1, "available": 1}
    assert limiter.state(key="user-1")["available"] == 0
    assert limiter.state(key="user-2")["available"] == 1
    assert limiter.state()["available"] == 2


def test_several_limits_are_taken_all_or_nothing(lk: latchkey.Client, name: Names) -> None:
    per_user = lk.rate_limiter(name("rluser"))
    per_user.configure(rate=1, per_ms=60_000)
    everyone = lk.rate_limiter(name("rlall"))
    everyone.configure(rate=5, per_ms=60_000)

    taken = lk.acquire_limits([per_user.limit(key="u1"), everyone.limit(permits=2)])
    assert taken == [
        {"name": per_user.name, "key": "u1", "permits": 1, "available": 0},
        {"name": everyone.name, "key": None, "permits": 2, "available": 3},
    ]
    # u1 is out of permits: the refusal names it and takes nothing from the other.
    with pytest.raises(RateLimited) as refused:
        lk.acquire_limits([Limit(everyone.name), Limit(per_user.name, key="u1")])
    assert refused.value.limit == {"name": per_user.name, "key": "u1"}
    assert refused.value.retry_after_ms is not None and refused.value.retry_after_ms > 0
    assert everyone.state()["available"] == 3
    # Another user is admitted by both.
    taken = lk.acquire_limits([{"name": per_user.name, "key": "u2"}, {"name": everyone.name}])
    assert [limit["available"] for limit in taken] == [0, 2]


def test_several_limits_name_an_unconfigured_limiter(lk: latchkey.Client, name: Names) -> None:
    configured = lk.rate_limiter(name("rlok"))
    configured.configure(rate=3, per_ms=60_000)
    missing = name("rlmissing")
    with pytest.raises(NotFound) as not_found:
        lk.acquire_limits([configured.limit(), Limit(missing, key="k")])
    assert not_found.value.limit == {"name": missing, "key": "k"}
    assert configured.state()["available"] == 3


@run_async
async def test_async_rate_limiter_acquire_wait_and_several_limits(url: str, name: Names) -> None:
    async with latchkey.AsyncClient(url) as lk:
        limiter = lk.rate_limiter(name("arl"))
        await limiter.configure(rate=4, per_ms=1000, burst=2)
        assert await limiter.acquire(2) == {"permits": 2, "available": 0}
        with pytest.raises(RateLimited) as refused:
            await limiter.acquire()
        assert refused.value.retry_after_ms is not None and 0 < refused.value.retry_after_ms <= 250
        events: List[Dict[str, Any]] = []

        async def on_waiting(event: Dict[str, Any]) -> None:  # a coroutine callback
            events.append(event)

        assert await limiter.acquire(wait_ms=5_000, on_waiting=on_waiting) == {"permits": 1, "available": 0}
        assert events and events[0]["retry_after_ms"] > 0

        other = lk.rate_limiter(name("arl2"))
        await other.configure(rate=1, per_ms=60_000)
        with pytest.raises(RateLimited) as refused:
            await lk.acquire_limits([other.limit(key="k"), limiter.limit(permits=2)])
        assert refused.value.limit == {"name": limiter.name, "key": None}
        assert (await other.state(key="k"))["available"] == 1
