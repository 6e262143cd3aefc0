"""The asyncio client against a real latchkey."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Callable, Dict, List, Tuple

import pytest
from helpers import QUEUED_KINDS, Queued, run_async, server_max_wait_ms

import latchkey
from latchkey import HoldLost, NotAcquired

Names = Callable[..., str]


@run_async
async def test_hold_is_renewed_across_several_leases(url: str, name: Names) -> None:
    n = name("arenew")
    async with latchkey.AsyncClient(url) as lk, latchkey.AsyncClient(url) as other:
        async with lk.lock(n, lease_ms=600, wait_ms=1000) as grant:
            token = grant.fencing_token
            await asyncio.sleep(2.0)  # more than three leases
            state = await other.lock_state(n)
            assert state["locked"] is True and state["fencing_token"] == token
            with pytest.raises(NotAcquired):
                await other.lock(n).acquire()
            assert not grant.lost.is_set()
            grant.check()
        assert (await other.lock_state(n))["locked"] is False


@run_async
async def test_lost_hold_shows_within_one_heartbeat_interval(url: str, name: Names) -> None:
    n = name("alost")
    async with latchkey.AsyncClient(url) as lk, latchkey.AsyncClient(url) as other:
        with pytest.raises(HoldLost) as lost:
            async with lk.lock(n, lease_ms=900) as grant:
                interval = grant.heartbeat_interval_ms / 1000
                assert await other.force_unlock(n) is True
                started = time.monotonic()
                await asyncio.wait_for(grant.lost.wait(), interval + 0.5)
                assert time.monotonic() - started <= interval + 0.5
                with pytest.raises(HoldLost):
                    grant.check()
        assert lost.value.reason == "not-held"


@run_async
async def test_release_when_the_body_raises(url: str, name: Names) -> None:
    n = name("araise")
    async with latchkey.AsyncClient(url) as lk:
        with pytest.raises(ValueError, match="boom"):
            async with lk.lock(n, lease_ms=30_000):
                raise ValueError("boom")
        assert (await lk.lock_state(n))["locked"] is False


@run_async
async def test_tasks_never_overlap_and_tokens_increase(url: str, name: Names) -> None:
    n = name("atasks")
    inside = 0
    overlaps: List[int] = []
    tokens: List[int] = []

    async def worker(client: latchkey.AsyncClient) -> None:
        nonlocal inside
        for _ in range(10):
            async with client.lock(n, lease_ms=2000, wait_ms=20_000) as grant:
                inside += 1
                if inside != 1:
                    overlaps.append(inside)
                tokens.append(grant.fencing_token)
                await asyncio.sleep(0.003)
                inside -= 1

    async with latchkey.AsyncClient(url) as one, latchkey.AsyncClient(url) as two:
        await asyncio.wait_for(asyncio.gather(worker(one), worker(two), worker(one)), 60)
    assert not overlaps
    assert len(tokens) == 30
    assert all(a < b for a, b in zip(tokens, tokens[1:])), tokens


@run_async
async def test_not_acquired_with_retry_after(url: str, name: Names) -> None:
    n = name("abusy")
    async with latchkey.AsyncClient(url) as lk, latchkey.AsyncClient(url) as other:
        held = await other.lock(n, lease_ms=5000).acquire()
        with pytest.raises(NotAcquired) as refused:
            await lk.lock(n, wait_ms=0).acquire()
        assert refused.value.retry_after_ms is not None and 0 < refused.value.retry_after_ms <= 5000
        started = time.monotonic()
        with pytest.raises(NotAcquired):
            await lk.lock(n, wait_ms=300).acquire()
        assert time.monotonic() - started >= 0.25
        assert await held.release() == {"released": True, "hold_count": 0}
        assert await held.release() is None


@run_async
async def test_wait_longer_than_the_servers_maximum(url: str, name: Names) -> None:
    maximum = server_max_wait_ms(url)
    n = name("along")
    async with latchkey.AsyncClient(url) as lk, latchkey.AsyncClient(url) as other:
        held = await other.lock(n, lease_ms=10_000).acquire()

        async def release_later() -> None:
            await asyncio.sleep(1.5)
            await held.release()

        releaser = asyncio.ensure_future(release_later())
        started = time.monotonic()
        async with lk.lock(n, wait_ms=maximum + 1000) as grant:
            assert 1.3 <= time.monotonic() - started < 5.0
            assert grant.fencing_token > held.fencing_token
        await releaser
        assert lk._limits.max_wait_ms == maximum


@run_async
async def test_fair_lock_streams_waiting_events(url: str, name: Names) -> None:
    n = name("afair")
    events: List[Dict[str, Any]] = []

    async def on_waiting(event: Dict[str, Any]) -> None:  # a coroutine callback
        events.append(event)

    async with latchkey.AsyncClient(url) as lk, latchkey.AsyncClient(url) as other:
        first = await other.fair_lock(n, lease_ms=10_000).acquire()

        async def release_later() -> None:
            await asyncio.sleep(0.5)
            await first.release()

        releaser = asyncio.ensure_future(release_later())
        async with lk.fair_lock(n, wait_ms=5000, on_waiting=on_waiting) as grant:
            assert grant.fencing_token > first.fencing_token
        await releaser
    assert events and events[0]["position"] == 0 and "retry_after_ms" in events[0]


async def _blocked(client: latchkey.AsyncClient, kind: str, name: str) -> Tuple[Queued, Any]:
    queued = Queued(kind, name)
    if kind == "semaphore":
        await queued.configure(client)
    return queued, await queued.blocker(client).acquire()


async def _until_waiting(client: latchkey.AsyncClient, queued: Queued) -> None:
    deadline = time.monotonic() + 5
    while (await queued.state(client))["waiters"] != 1:
        assert time.monotonic() < deadline, f"{queued.kind}: the waiter never waited"
        await asyncio.sleep(0.02)


async def _assert_no_place_left(blocker: Any, client: latchkey.AsyncClient, queued: Queued) -> None:
    """The blocker releases; a try is then granted at once."""
    await blocker.release()
    try:
        await (await queued.attempt(client).acquire()).release()
    except NotAcquired as refused:
        pytest.fail(f"{queued.kind}: the waiter that gave up left a place behind: {refused.problem}")


@pytest.mark.parametrize("kind", QUEUED_KINDS)
@run_async
async def test_a_wait_that_runs_out_leaves_its_queue(url: str, kind: str, name: Names) -> None:
    async with latchkey.AsyncClient(url) as lk, latchkey.AsyncClient(url) as other:
        queued, blocker = await _blocked(other, kind, name("aleave"))
        with pytest.raises(NotAcquired):
            await queued.waiter(lk, wait_ms=400).acquire()
        await _assert_no_place_left(blocker, other, queued)


@pytest.mark.parametrize("kind", QUEUED_KINDS)
@run_async
async def test_a_cancelled_wait_leaves_its_queue(url: str, kind: str, name: Names) -> None:
    async with latchkey.AsyncClient(url) as lk, latchkey.AsyncClient(url) as other:
        queued, blocker = await _blocked(other, kind, name("acancel"))
        waiting = asyncio.ensure_future(queued.waiter(lk, wait_ms=20_000).acquire())
        await _until_waiting(other, queued)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await _assert_no_place_left(blocker, other, queued)


@run_async
async def test_a_wait_cut_short_by_wait_for_leaves_its_queue(url: str, name: Names) -> None:
    async with latchkey.AsyncClient(url) as lk, latchkey.AsyncClient(url) as other:
        queued, blocker = await _blocked(other, "fair-lock", name("awaitfor"))
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(queued.waiter(lk, wait_ms=20_000).acquire(), 0.5)
        await _assert_no_place_left(blocker, other, queued)


@run_async
async def test_every_primitive(url: str, name: Names) -> None:
    async with latchkey.AsyncClient(url) as lk, latchkey.AsyncClient(url) as other:
        # read-write locks
        rw = name("arw")
        async with lk.read_lock(rw) as r1, other.read_lock(rw) as r2:
            assert r1.mode == r2.mode == "read"
            assert (await other.rwlock_state(rw))["readers"] == 2
            with pytest.raises(latchkey.UpgradeWouldDeadlock):
                await lk.write_lock(rw, holder=r1.holder).acquire()
        async with lk.write_lock(rw, wait_ms=1000) as writer:
            assert writer.mode == "write"

        # semaphores
        sem = name("asem")
        await lk.semaphore(sem).configure(2)
        async with lk.semaphore_permits(sem, permits=2, lease_ms=600) as permits:
            assert permits.permits == 2
            await asyncio.sleep(0.9)  # renewed past a lease
            assert (await other.semaphore(sem).state())["available"] == 0
            permits.check()
        assert (await lk.semaphore(sem).state())["available"] == 2
        await lk.semaphore(sem).delete()

        # latches
        latch = lk.latch(name("alatch"))
        await latch.set(2)
        key = "py-" + uuid.uuid4().hex
        assert await latch.count_down(idempotency_key=key) == {"count": 1, "open": False}
        assert await latch.count_down(idempotency_key=key) == {"count": 1, "open": False}
        counts: List[Dict[str, Any]] = []
        waiter = asyncio.ensure_future(other.latch(latch.name).wait(5000, on_count=counts.append))
        await asyncio.sleep(0.3)
        assert await latch.count_down() == {"count": 0, "open": True}
        assert (await waiter)["open"] is True
        assert counts and counts[0]["count"] == 1
        assert (await latch.state())["open"] is True

        # multi-locks
        a, b = name("ama"), name("amb")
        async with lk.multi_lock([a, b], lease_ms=600) as multi:
            await asyncio.sleep(0.9)
            with pytest.raises(NotAcquired) as refused:
                await other.multi_lock([b]).acquire()
            assert refused.value.blocked_by == [b]
            assert sorted(multi.fencing_tokens) == sorted([a, b])
        assert not (await other.lock_state(a))["locked"]

        # RedLock
        red = name("ared")
        async with lk.redlock(red, lease_ms=1000) as grant:
            assert grant.nodes is not None and grant.nodes.acquired > grant.nodes.total // 2
            await asyncio.sleep(1.2)
            with pytest.raises(NotAcquired):
                await other.redlock(red).acquire()
            grant.check()
        assert (await other.redlock_state(red))["locked_on"] == 0


@run_async
async def test_owner_labels_reach_the_state_read(url: str, name: Names) -> None:
    import os
    import socket
    import sys

    program = os.path.basename(sys.argv[0]) or "python"
    default = f"{socket.gethostname()} pid {os.getpid()} {program}"
    rw, sem = name("aowner-rw"), name("aowner-sem")
    async with latchkey.AsyncClient(url) as lk:
        async with lk.write_lock(rw):
            holds = (await lk.rwlock_state(rw))["holds"]
            assert [(h["owner"], h["mode"]) for h in holds] == [(default, "write")]
        await lk.semaphore(sem).configure(1)
        async with lk.semaphore_permits(sem, owner="a\nb"):
            holds = (await lk.semaphore(sem).state())["holds"]
            assert [h["owner"] for h in holds] == ["a b"]
