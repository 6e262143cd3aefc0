"""Sessions with the sync and the asyncio client against a real latchkey."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Callable, List

import httpx
import pytest
from helpers import run_async

import latchkey
from latchkey import HoldLost, NotAcquired

Names = Callable[..., str]


def delete_session_from_outside(url: str, session_id: str) -> None:
    """What another process (or an operator) knowing the id does."""
    key = os.environ.get("LATCHKEY_API_KEY")
    answer = httpx.delete(
        url.rstrip("/") + f"/sessions/{session_id}",
        headers={"Authorization": f"Bearer {key}"} if key else {},
        timeout=5,
    )
    assert answer.status_code == 200, answer.text


class HeartbeatSpy:
    """Counts the heartbeats a client sends (still sent to the service)."""

    def __init__(self, client: latchkey.Client) -> None:
        self.paths: List[str] = []
        perform = client._perform

        def spying(call: Any) -> Any:
            if call.path.endswith("/heartbeat"):
                self.paths.append(call.path)
            return perform(call)

        client._perform = spying  # type: ignore[method-assign]


def test_holds_in_a_session_and_its_delete_on_exit_releases_them(
    lk: latchkey.Client, other: latchkey.Client, name: Names
) -> None:
    lock, sem = name("slock"), name("ssem")
    lk.semaphore(sem).configure(2)
    with lk.session(ttl_ms=5_000) as session:
        assert session.held and session.ttl_ms == 5_000
        held = lk.lock(lock, session=session).acquire()
        permits = lk.semaphore_permits(sem, 2, session=session.id).acquire()  # by id, too
        assert held.lease_ms <= 5_000 and permits.permits == 2
        assert [h["session"] for h in other.lock_state(lock)["holds"]] == [True]
        assert other.semaphore(sem).state()["available"] == 0
        with pytest.raises(NotAcquired):
            other.lock(lock).acquire()
        assert session.state()["holds"] == 2
    # The session's DELETE released both holds.
    assert other.lock_state(lock)["locked"] is False
    assert other.semaphore(sem).state()["available"] == 2
    assert not held.held and held.release() is None
    with pytest.raises(latchkey.NotFound):
        session.state()


def test_a_session_release_answers_how_many_holds_it_released(lk: latchkey.Client, name: Names) -> None:
    session = lk.session(ttl_ms=5_000).acquire()
    lk.lock(name("scount"), session=session).acquire()
    lk.multi_lock([name("sa"), name("sb")], session=session).acquire()
    assert session.release() == {"released": 3}
    assert session.release() is None


def test_holds_in_a_session_do_not_renew_themselves(url: str, name: Names) -> None:
    n = name("srenew")
    with latchkey.Client(url) as lk, latchkey.Client(url) as other:
        spy = HeartbeatSpy(lk)
        with lk.session(ttl_ms=600) as session:
            with lk.lock(n, session=session) as held:
                time.sleep(2.0)  # more than three TTLs: the session's renewal keeps both
                session.check()
                held.check()
                assert other.lock_state(n)["locked"] is True
                with pytest.raises(NotAcquired):
                    other.lock(n).acquire()
        assert other.lock_state(n)["locked"] is False
    assert spy.paths, "the session never renewed itself"
    assert all(path.startswith("/sessions/") for path in spy.paths), spy.paths


def test_lost_fires_when_the_session_is_deleted_from_outside(
    url: str, lk: latchkey.Client, other: latchkey.Client, name: Names
) -> None:
    n = name("sgone")
    with pytest.raises(HoldLost) as lost:
        with lk.session(ttl_ms=900) as session:
            held = lk.lock(n, session=session).acquire()
            delete_session_from_outside(url, session.id)
            assert session.lost.wait(session.heartbeat_interval_ms / 1000 + 1.0), "the loss was not noticed"
            assert session.lost_reason == "not-held"
            assert held.lost.is_set() and held.lost_reason == "session-lost"
            with pytest.raises(HoldLost):
                held.check()
            assert other.lock_state(n)["locked"] is False
    assert lost.value.reason == "not-held"


def test_a_hold_takes_a_lease_or_a_session_not_both(lk: latchkey.Client, name: Names) -> None:
    with lk.session(ttl_ms=5_000) as session:
        with pytest.raises(ValueError):
            lk.lock(name("sboth"), lease_ms=5_000, session=session)


@run_async
async def test_async_session_holds_renewal_and_loss(url: str, name: Names) -> None:
    n, sem = name("aslock"), name("assem")
    async with latchkey.AsyncClient(url) as lk, latchkey.AsyncClient(url) as other:
        await lk.semaphore(sem).configure(1)
        async with lk.session(ttl_ms=600) as session:
            async with lk.write_lock(n, session=session) as writer:
                await lk.semaphore_permits(sem, session=session).acquire()
                await asyncio.sleep(1.5)  # past the TTL, renewed by the session
                writer.check()
                assert (await other.rwlock_state(n))["mode"] == "write"
                assert (await other.semaphore(sem).state())["available"] == 0
        assert (await other.rwlock_state(n))["mode"] is None
        assert (await other.semaphore(sem).state())["available"] == 1

        with pytest.raises(HoldLost):
            async with lk.session(ttl_ms=900) as session:
                held = await lk.lock(n, session=session).acquire()
                delete_session_from_outside(url, session.id)
                await asyncio.wait_for(session.lost.wait(), session.heartbeat_interval_ms / 1000 + 1.0)
                assert held.lost.is_set() and held.lost_reason == "session-lost"


def test_a_hold_in_a_session_without_an_owner_of_its_own_shows_the_sessions(lk: latchkey.Client, name: Names) -> None:
    lock = name("owner-in-session")
    with lk.session(ttl_ms=5_000, owner="nightly-job") as session:
        with lk.lock(lock, session=session):
            assert lk.lock_state(lock)["holds"][0]["owner"] == "nightly-job"
