"""The synchronous client against a real latchkey."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from typing import Any, Callable, Dict, List

import pytest
from helpers import QUEUED_KINDS, Queued, Spy, later, server_max_wait_ms

import latchkey
from latchkey import HoldLost, NotAcquired

Names = Callable[..., str]


# --- holds, renewal, loss ------------------------------------------------------


def test_hold_is_renewed_across_several_leases(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("renew")
    with lk.lock(n, lease_ms=600, wait_ms=1000) as grant:
        assert grant.lease_ms == 600
        assert grant.heartbeat_interval_ms == 200
        token = grant.fencing_token
        time.sleep(2.0)  # more than three leases
        state = other.lock_state(n)
        assert state["locked"] is True
        assert state["fencing_token"] == token
        assert 0 < state["ttl_ms"] <= 600
        with pytest.raises(NotAcquired):
            other.lock(n).acquire()
        assert not grant.lost.is_set()
        grant.check()
        assert grant.fencing_token == token
    assert other.lock_state(n)["locked"] is False


def test_lost_hold_shows_within_one_heartbeat_interval(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("lost")
    with pytest.raises(HoldLost) as lost:
        with lk.lock(n, lease_ms=900) as grant:
            interval = grant.heartbeat_interval_ms / 1000
            assert other.force_unlock(n) is True
            started = time.monotonic()
            assert grant.lost.wait(interval + 0.5), "the loss was not noticed"
            assert time.monotonic() - started <= interval + 0.5
            assert grant.lost_reason == "not-held"
            with pytest.raises(HoldLost):
                grant.check()
    assert lost.value.reason == "not-held"
    assert lost.value.status == 404


def test_lease_ends_by_the_clients_clock_without_a_heartbeat(lk: latchkey.Client, name: Names) -> None:
    n = name("expiry")
    # Heartbeats far apart: the lease ends before the first one.
    grant = lk.lock(n, lease_ms=600, heartbeat_interval_ms=60_000).acquire()
    started = time.monotonic()
    assert grant.lost.wait(2.0)
    assert 0.5 <= time.monotonic() - started <= 1.0
    assert grant.lost_reason == "expired"
    with pytest.raises(HoldLost):
        grant.check()
    assert grant.release() in (None, {"released": True, "hold_count": 0})


def test_release_when_the_body_raises(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("raise")
    with pytest.raises(ValueError, match="boom"):
        with lk.lock(n, lease_ms=30_000):
            raise ValueError("boom")
    assert other.lock_state(n)["locked"] is False
    other.lock(n).acquire().release()


def test_the_bodys_exception_wins_over_a_lost_hold(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("both")
    with pytest.raises(KeyError):
        with lk.lock(n, lease_ms=900) as grant:
            other.force_unlock(n)
            assert grant.lost.wait(2)
            raise KeyError("body")


def test_release_finds_a_hold_lost_unnoticed(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("unnoticed")
    grant = lk.lock(n, lease_ms=30_000).acquire()  # next heartbeat in 10 s
    other.force_unlock(n)
    with pytest.raises(HoldLost) as lost:
        grant.release()
    assert lost.value.reason == "not-held"
    assert grant.release() is None  # already released


def test_explicit_acquire_release_and_reentrancy(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("explicit")
    holder = "py-test-" + uuid.uuid4().hex
    first = lk.lock(n, holder=holder, lease_ms=5000).acquire()
    again = lk.lock(n, holder=holder, lease_ms=5000).acquire()
    assert first.holder == again.holder == holder
    assert again.hold_count == 2
    assert again.fencing_token == first.fencing_token
    assert holder not in repr(first) and holder not in repr(first.grant)
    assert again.release() == {"released": False, "hold_count": 1}
    assert other.lock_state(n)["locked"] is True
    assert first.release() == {"released": True, "hold_count": 0}
    assert first.release() is None
    assert other.lock_state(n)["locked"] is False


def test_server_generates_the_holder_id(lk: latchkey.Client, name: Names) -> None:
    with lk.lock(name("gen")) as grant:
        assert len(grant.holder) >= 16
        assert grant.holder not in repr(grant)


def test_threads_never_overlap_and_tokens_increase(url: str, name: Names) -> None:
    n = name("threads")
    guard = threading.Lock()
    inside = [0]
    overlaps: List[int] = []
    tokens: List[int] = []
    errors: List[BaseException] = []

    def worker() -> None:
        try:
            with latchkey.Client(url) as client:
                for _ in range(10):
                    with client.lock(n, lease_ms=2000, wait_ms=20_000) as grant:
                        with guard:
                            inside[0] += 1
                            if inside[0] != 1:
                                overlaps.append(inside[0])
                            tokens.append(grant.fencing_token)
                        time.sleep(0.003)
                        with guard:
                            inside[0] -= 1
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert not overlaps
    assert len(tokens) == 30
    assert all(a < b for a, b in zip(tokens, tokens[1:])), tokens


# --- waiting -------------------------------------------------------------------


def test_not_acquired_at_once_with_wait_ms_0(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("busy")
    with other.lock(n, lease_ms=5000):
        started = time.monotonic()
        with pytest.raises(NotAcquired) as refused:
            lk.lock(n).acquire()
        assert time.monotonic() - started < 1.0
        error = refused.value
        assert error.status == 409 and error.slug == "lock-held"
        assert error.retry_after_ms is not None and 0 < error.retry_after_ms <= 5000
        assert error.problem is not None and error.problem["retry_after_ms"] == error.retry_after_ms


def test_not_acquired_after_the_whole_wait(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("timeout")
    with other.lock(n, lease_ms=5000):
        started = time.monotonic()
        with pytest.raises(NotAcquired):
            lk.lock(n, wait_ms=400).acquire()
        assert 0.35 <= time.monotonic() - started < 2.0


def test_waiter_is_granted_when_the_holder_releases(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("handoff")
    held = other.lock(n, lease_ms=5000).acquire()
    releaser = later(0.5, held.release)
    started = time.monotonic()
    with lk.lock(n, wait_ms=5000) as grant:
        assert 0.4 <= time.monotonic() - started < 3.0
        assert grant.fencing_token > held.fencing_token
    releaser.join()


def test_a_short_lease_after_a_longer_wait_is_not_lost(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    """The lease counts from the grant at the end of the wait, not from when
    the waiting request was sent."""
    n = name("shortafterwait")
    held = other.lock(n, lease_ms=10_000).acquire()
    releaser = later(1.2, held.release)
    with lk.lock(n, lease_ms=600, wait_ms=5000) as grant:
        releaser.join()
        time.sleep(1.0)
        grant.check()
        assert other.lock_state(n)["fencing_token"] == grant.fencing_token
        assert other.lock_state(n)["locked"] is True


def test_wait_longer_than_the_servers_maximum(url: str, lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    maximum = server_max_wait_ms(url)
    n = name("longwait")
    spy = Spy(lk)
    held = other.lock(n, lease_ms=10_000).acquire()
    releaser = later(1.5, held.release)
    started = time.monotonic()
    with lk.lock(n, wait_ms=maximum + 1000) as grant:
        assert 1.3 <= time.monotonic() - started < 5.0
        assert grant.fencing_token > held.fencing_token
    releaser.join()
    # The first try asked for it all and learned the maximum from the 400;
    # the next ones fit, under one holder id.
    waits = [call["wait_ms"] for call in spy.calls]
    assert waits[0] == maximum + 1000
    assert all(wait <= maximum for wait in waits[1:]) and len(waits) >= 2
    assert len({call.get("holder") for call in spy.calls[1:]}) == 1


def test_a_split_wait_keeps_the_fair_queue_place(url: str, other: latchkey.Client, name: Names) -> None:
    """As if the service capped a long-poll at 300 ms: a 5 s wait becomes
    many polls under one holder id, and keeps its place in the fair queue
    ahead of a waiter that came later."""
    n = name("fairsplit")
    first = other.fair_lock(n, lease_ms=10_000).acquire()
    granted: Dict[str, float] = {}
    errors: List[BaseException] = []
    with latchkey.Client(url) as early, latchkey.Client(url) as late:
        early._limits.max_wait_ms = 300
        spy = Spy(early)

        def take(client: latchkey.Client, who: str) -> None:
            try:
                with client.fair_lock(n, wait_ms=5000, lease_ms=5000):
                    granted[who] = time.monotonic()
                    time.sleep(0.2)
            except BaseException as error:  # noqa: BLE001
                errors.append(error)

        t_early = threading.Thread(target=take, args=(early, "early"))
        t_early.start()
        time.sleep(0.5)
        t_late = threading.Thread(target=take, args=(late, "late"))
        t_late.start()
        time.sleep(1.0)
        first.release()
        t_early.join(10)
        t_late.join(10)
    assert not errors, errors
    assert granted["early"] < granted["late"]
    assert len(spy.calls) >= 4
    assert all(call["wait_ms"] <= 300 for call in spy.calls)
    holders = {call["holder"] for call in spy.calls}
    assert len(holders) == 1 and None not in holders


def test_fair_lock_streams_waiting_events_with_position(lk: latchkey.Client, other: latchkey.Client, url: str, name: Names) -> None:
    n = name("fairsse")
    first = other.fair_lock(n, lease_ms=10_000).acquire()
    errors: List[BaseException] = []

    def second() -> None:
        try:
            with latchkey.Client(url) as client, client.fair_lock(n, wait_ms=5000):
                time.sleep(0.3)
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    queued = threading.Thread(target=second)
    queued.start()
    time.sleep(0.3)
    events: List[Dict[str, Any]] = []
    releaser = later(0.5, first.release)
    with lk.fair_lock(n, wait_ms=5000, on_waiting=events.append) as grant:
        assert grant.fencing_token > first.fencing_token
    queued.join(5)
    releaser.join()
    assert not errors, errors
    assert events, "no waiting events"
    assert all("retry_after_ms" in event for event in events)
    assert events[0]["position"] == 1
    assert any(event.get("position") == 0 for event in events), events


# --- a wait that gives up leaves its queue ------------------------------------------


def _until_waiting(client: latchkey.Client, queued: Queued) -> None:
    deadline = time.monotonic() + 5
    while queued.state(client)["waiters"] != 1:
        assert time.monotonic() < deadline, f"{queued.kind}: the waiter never waited"
        time.sleep(0.02)


def _assert_no_place_left(blocker: Any, client: latchkey.Client, queued: Queued) -> None:
    """The blocker releases; a try is then granted at once."""
    blocker.release()
    try:
        queued.attempt(client).acquire().release()
    except NotAcquired as refused:
        pytest.fail(f"{queued.kind}: the waiter that gave up left a place behind: {refused.problem}")


@pytest.mark.parametrize("kind", QUEUED_KINDS)
def test_a_wait_that_runs_out_leaves_its_queue(lk: latchkey.Client, other: latchkey.Client, kind: str, name: Names) -> None:
    queued = Queued(kind, name("leave"))
    queued.configure(other)
    blocker = queued.blocker(other).acquire()
    with pytest.raises(NotAcquired):
        queued.waiter(lk, wait_ms=400).acquire()
    _assert_no_place_left(blocker, other, queued)


@pytest.mark.parametrize("kind", QUEUED_KINDS)
def test_a_wait_interrupted_by_ctrl_c_leaves_its_queue(lk: latchkey.Client, other: latchkey.Client, kind: str, name: Names) -> None:
    """SIGINT to the process while it waits in a long-poll: KeyboardInterrupt,
    after the client left the queue."""
    queued = Queued(kind, name("sigint"))
    queued.configure(other)
    blocker = queued.blocker(other).acquire()
    main = threading.get_ident()

    def interrupt() -> None:
        _until_waiting(other, queued)
        signal.pthread_kill(main, signal.SIGINT)

    # What a terminal's Ctrl-C gives: Python's own handler. A process that a
    # non-interactive shell started in the background inherits SIGINT
    # ignored, and Python then raises no KeyboardInterrupt at all.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupter = threading.Thread(target=interrupt)
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            queued.waiter(lk, wait_ms=20_000, holder=f"py-{uuid.uuid4().hex}").acquire()
    finally:
        interrupter.join()
        signal.signal(signal.SIGINT, previous)
    _assert_no_place_left(blocker, other, queued)


def test_a_wait_for_more_permits_that_runs_out_leaves_its_queue_and_keeps_the_permits_held(
    lk: latchkey.Client, other: latchkey.Client, name: Names
) -> None:
    n = name("morepermits")
    other.semaphore(n).configure(2)
    holder = f"py-{uuid.uuid4().hex}"
    mine = lk.semaphore_permits(n, 1, holder=holder, lease_ms=30_000).acquire()
    blocker = other.semaphore_permits(n, 1, lease_ms=30_000).acquire()
    with pytest.raises(NotAcquired):
        lk.semaphore_permits(n, 1, holder=holder, wait_ms=400).acquire()
    assert mine.renew().permits == 1, "the permit it held is still held"
    assert other.semaphore(n).state()["available"] == 0
    blocker.release()
    other.semaphore_permits(n, 1).acquire().release()
    mine.release()
    assert other.semaphore(n).state()["available"] == 2


def test_a_wait_whose_on_waiting_callback_raises_leaves_its_queue(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    queued = Queued("fair-lock", name("raises"))
    blocker = queued.blocker(other).acquire()

    def give_up(event: Dict[str, Any]) -> None:
        raise RuntimeError("gave up")

    with pytest.raises(RuntimeError, match="gave up"):
        queued.waiter(lk, wait_ms=20_000, on_waiting=give_up).acquire()
    _assert_no_place_left(blocker, other, queued)


# --- every primitive -------------------------------------------------------------


def test_read_and_write_locks(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("rw")
    r1 = lk.read_lock(n, lease_ms=5000).acquire()
    r2 = other.read_lock(n, lease_ms=5000).acquire()
    assert r1.mode == r2.mode == "read"
    state = other.rwlock_state(n)
    assert state["mode"] == "read" and state["readers"] == 2
    with pytest.raises(NotAcquired):
        other.write_lock(n).acquire()
    with pytest.raises(latchkey.UpgradeWouldDeadlock):
        lk.write_lock(n, holder=r1.holder).acquire()
    assert r2.release() is not None
    upgraded = lk.write_lock(n, holder=r1.holder).acquire()  # the only reader may
    assert upgraded.mode == "write"
    assert upgraded.release() is not None
    assert other.rwlock_state(n)["mode"] == "read"  # still a reader
    r1.release()
    assert other.rwlock_state(n)["mode"] is None
    # (The writer refused above keeps its queue place for the queue grace,
    # so the next part uses another rwlock.)
    m = name("rw2")
    with lk.write_lock(m, lease_ms=600) as writer:
        time.sleep(1.3)  # renewed past two leases
        assert writer.mode == "write"
        with pytest.raises(NotAcquired):
            other.read_lock(m).acquire()
        writer.check()
    with other.read_lock(m, wait_ms=1000):
        pass


def test_semaphore_permits(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("sem")
    sem = lk.semaphore(n)
    assert sem.configure(3)["permits"] == 3
    two = lk.semaphore_permits(n, permits=2, lease_ms=600).acquire()
    assert two.permits == 2
    time.sleep(1.0)  # renewed past a lease
    # A refused request is queued (for the queue grace); polling again as
    # the same holder keeps its place.
    waiter = "py-waiter-" + uuid.uuid4().hex
    with pytest.raises(NotAcquired) as refused:
        other.semaphore_permits(n, permits=2, holder=waiter).acquire()
    assert refused.value.available == 1 and refused.value.slug == "no-permits"
    assert refused.value.position == 0
    with other.semaphore_permits(n) as one:  # fits: may pass the waiter
        assert one.permits == 1
        assert sem.state()["available"] == 0
        releaser = later(0.4, two.release)
        started = time.monotonic()
        with other.semaphore_permits(n, permits=2, holder=waiter, wait_ms=5000) as waited:
            assert waited.permits == 2
            assert time.monotonic() - started < 2.0
        releaser.join()
    assert sem.state()["available"] == 3
    with pytest.raises(latchkey.OutOfRange) as too_many:
        lk.semaphore_permits(n, permits=4).acquire()
    assert too_many.value.field == "permits"
    assert sem.delete() is True
    with pytest.raises(latchkey.NotFound):
        lk.semaphore_permits(n).acquire()
    with pytest.raises(latchkey.NotFound):
        sem.state()


def test_latch(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("latch")
    latch = lk.latch(n)
    assert latch.set(3, ttl_ms=60_000) == {"name": n, "count": 3, "open": False}
    with pytest.raises(latchkey.LatchExists):
        latch.set(1)
    key = "py-" + uuid.uuid4().hex
    assert latch.count_down(idempotency_key=key) == {"count": 2, "open": False}
    assert latch.count_down(idempotency_key=key) == {"count": 2, "open": False}  # counted once
    assert latch.state()["count"] == 2
    started = time.monotonic()
    assert latch.wait(300) == {"count": 2, "open": False}
    assert time.monotonic() - started >= 0.25

    results: Dict[str, Any] = {}
    counts: List[Dict[str, Any]] = []

    def wait_plain() -> None:
        results["plain"] = other.latch(n).wait(5000)

    def wait_sse() -> None:
        results["sse"] = other.latch(n).wait(5000, on_count=counts.append)

    threads = [threading.Thread(target=wait_plain), threading.Thread(target=wait_sse)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    assert latch.count_down() == {"count": 1, "open": False}
    time.sleep(0.2)
    assert latch.count_down() == {"count": 0, "open": True}
    for thread in threads:
        thread.join(5)
    assert results["plain"]["open"] is True
    assert results["sse"]["open"] is True
    assert [c["count"] for c in counts][:1] == [2] and {"count": 1, "open": False} in counts
    with pytest.raises(latchkey.NotFound):
        latch.count_down()
    assert latch.state() == {"name": n, "count": 0, "open": True}
    latch.set(1)
    assert latch.delete() is True
    assert latch.wait(0)["open"] is True


def test_latch_wait_in_pieces(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("latchsplit")
    lk._limits.max_wait_ms = 250  # as if the service capped a long-poll at 250 ms
    latch = lk.latch(n)
    latch.set(1)
    started = time.monotonic()
    assert latch.wait(700)["open"] is False
    assert time.monotonic() - started >= 0.65
    opener = later(0.6, lambda: other.latch(n).count_down())
    assert latch.wait(5000)["open"] is True
    opener.join()


def test_multi_lock(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    a, b, c = name("ma"), name("mb"), name("mc")
    multi = lk.multi_lock([a, b], lease_ms=600).acquire()
    assert sorted(multi.fencing_tokens) == sorted([a, b])
    assert multi.names == [a, b]
    time.sleep(1.3)  # renewed past two leases
    assert other.lock_state(a)["locked"] and other.lock_state(b)["locked"]
    with pytest.raises(NotAcquired):
        other.lock(b).acquire()
    with pytest.raises(NotAcquired) as refused:
        other.multi_lock([b, c]).acquire()
    assert refused.value.blocked_by == [b]
    multi.check()
    assert multi.release() == {"released": [a, b]}
    with other.multi_lock([b, c], wait_ms=1000) as second:
        assert second.fencing_tokens[b] > multi.fencing_tokens[b]
    assert not other.lock_state(c)["locked"]


def test_redlock(lk: latchkey.Client, other: latchkey.Client, name: Names) -> None:
    n = name("red")
    with lk.redlock(n, lease_ms=1000) as grant:
        assert grant.nodes is not None and grant.nodes.total >= 3
        assert grant.nodes.acquired > grant.nodes.total // 2
        assert grant.validity_ms is not None and 0 < grant.validity_ms <= 1000
        time.sleep(1.5)  # renewed past a lease
        assert other.redlock_state(n)["locked_on"] > grant.nodes.total // 2
        with pytest.raises(NotAcquired):
            other.redlock(n).acquire()
        grant.check()
    assert other.redlock_state(n)["locked_on"] == 0
    with other.redlock(n) as again:
        assert again.fencing_token > grant.fencing_token


# --- errors ------------------------------------------------------------------------


def test_errors_carry_the_problem(lk: latchkey.Client, name: Names) -> None:
    with pytest.raises(latchkey.InvalidRequest) as bad_name:
        lk.lock("no spaces allowed").acquire()
    assert bad_name.value.slug == "invalid-name" and bad_name.value.status == 400
    with pytest.raises(latchkey.OutOfRange) as short:
        lk.lock(name("range"), lease_ms=1).acquire()
    assert short.value.field == "lease_ms"
    assert isinstance(short.value, latchkey.LatchkeyError)
    with pytest.raises(latchkey.TransportError):
        with latchkey.Client("http://127.0.0.1:9", timeout=1) as nowhere:
            nowhere.lock_state("x")


def test_url_defaults_to_the_environment(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LATCHKEY_URL", url)
    with latchkey.Client() as client:
        assert client.url == url.rstrip("/")
        assert client.lock_state("py-env")["name"] == "py-env"
    monkeypatch.delenv("LATCHKEY_URL")
    with latchkey.Client() as client:
        assert client.url == "http://127.0.0.1:8080"


# --- owner labels ------------------------------------------------------------------


def test_owner_labels_reach_the_state_read(url: str, name: Names) -> None:
    import os
    import socket
    import sys

    program = os.path.basename(sys.argv[0]) or "python"
    default = f"{socket.gethostname()} pid {os.getpid()} {program}"
    rw, sem = name("owner-rw"), name("owner-sem")
    with latchkey.Client(url) as lk:
        with lk.read_lock(rw):
            holds = lk.rwlock_state(rw)["holds"]
            assert [(h["owner"], h["mode"]) for h in holds] == [(default, "read")]
        lk.semaphore(sem).configure(2)
        with lk.semaphore_permits(sem, 2, owner="job 7"):
            holds = lk.semaphore(sem).state()["holds"]
            assert [(h["owner"], h.get("permits")) for h in holds] == [("job 7", 2)]
    # Control characters become spaces; 200 bytes at most, cut between characters.
    with latchkey.Client(url, owner="nightly\texport " + "é" * 150) as lk:
        with lk.write_lock(rw):
            (hold,) = lk.rwlock_state(rw)["holds"]
            assert hold["owner"] == "nightly export " + "é" * 92
    with latchkey.Client(url, owner="") as lk:
        with lk.write_lock(rw):
            (hold,) = lk.rwlock_state(rw)["holds"]
            assert hold["owner"] is None
