"""The synchronous client: ``Client``."""

from __future__ import annotations

import json
import logging
import threading
import time
from types import TracebackType
from typing import (
    Any,
    Callable,
    Dict,
    Generic,
    List,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
)

import httpx

from ._config import auth_headers, clean_owner, client_timeout, default_owner, http_limits, resolve_url
from ._core import (
    NO_BODY,
    Answer,
    Beat,
    Flow,
    G,
    HoldOp,
    HttpCall,
    LeaseClock,
    MultiOp,
    NoAnswer,
    Outcome,
    ServerLimits,
    SingleOp,
    Sleep,
    SseDecoder,
    SseFinal,
    acquire_flow,
    count_down_flow,
    judge_heartbeat,
    latch_wait_flow,
    leave_call,
    now,
    problem_of,
    raise_for,
    seg,
    single,
    wait_holder,
)
from ._errors import HoldLost, LatchkeyError, Problem
from ._models import (
    Grant,
    LatchState,
    LockState,
    MultiGrant,
    RedlockState,
    RwLockState,
    SemaphoreState,
)
from ._views import MultiGrantView, SingleGrantView

log = logging.getLogger("latchkey")

T = TypeVar("T")
H = TypeVar("H", "Hold", "MultiHold")

WaitingCallback = Callable[[Dict[str, Any]], Any]


class _SyncHold(Generic[G]):
    """A hold that is renewed by a daemon thread until it is released."""

    def __init__(
        self,
        client: "Client",
        op: HoldOp[G],
        grant: G,
        sent_at: float,
        heartbeat_interval_ms: Optional[int],
        received_at: Optional[float] = None,
    ) -> None:
        self._client = client
        self._op: HoldOp[G] = op
        self._grant: G = grant
        self._mutex = threading.RLock()
        self._clock = LeaseClock(grant, sent_at, heartbeat_interval_ms, received_at)
        self._lost_info: Optional[Tuple[str, str, Optional[Problem], Optional[int]]] = None
        self._released = False
        self._stop = threading.Event()
        #: Set when the hold is lost (see ``check``); wait on it or poll it.
        self.lost = threading.Event()
        self._thread = threading.Thread(
            target=self._renew_loop, name=f"latchkey-renew {op.kind}", daemon=True
        )
        client._track(self)
        self._thread.start()

    # --- state ---------------------------------------------------------------

    @property
    def grant(self) -> G:
        """The latest grant: the acquire's, then each heartbeat's."""
        with self._mutex:
            return self._grant

    @property
    def held(self) -> bool:
        """Neither released nor known to be lost."""
        return not self._released and not self.lost.is_set()

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the hold was lost (``None`` while it is not)."""
        info = self._lost_info
        return info[0] if info else None

    def check(self) -> None:
        """Raise ``HoldLost`` if the hold is lost: the service said it is
        not held, or no heartbeat succeeded before the lease ended by this
        process's clock. Call it before acting on what the hold protects."""
        if not self.lost.is_set():
            with self._mutex:
                if not self._released and now() >= self._clock.deadline:
                    self._set_lost("expired", "the lease ended before a heartbeat succeeded")
        if self.lost.is_set():
            raise self._lost_error()

    # --- renewal ---------------------------------------------------------------

    def _set_lost(self, reason: str, message: str, problem: Optional[Problem] = None, status: Optional[int] = None) -> None:
        # Callers hold self._mutex, or own the hold's state exclusively.
        if self._lost_info is None:
            self._lost_info = (reason, message, problem, status)
            log.warning("latchkey: %r lost: %s", self, message)
            self.lost.set()

    def _lost_error(self) -> HoldLost:
        assert self._lost_info is not None
        reason, message, problem, status = self._lost_info
        return HoldLost(
            f"{self._op.label()}: hold lost: {message}", reason=reason, problem=problem, status=status
        )

    def _beat(self, lease_ms: Optional[int]) -> Tuple[str, Optional[LatchkeyError]]:
        with self._mutex:
            left = self._clock.deadline - now()
            holder = self._grant.holder
            if left <= 0:
                self._set_lost("expired", "the lease ended before a heartbeat succeeded")
                return Beat.LOST, None
        call = self._op.heartbeat_call(holder, lease_ms)
        call.deadline_s = left
        sent = now()
        answer = self._client._perform(call)
        verdict, grant, error = judge_heartbeat(self._op, answer)
        with self._mutex:
            if verdict == Beat.OK and grant is not None:
                self._grant = grant
                self._clock.renewed(grant, sent)
                log.debug("latchkey: renewed %r", self)
            elif verdict == Beat.LOST:
                self._set_lost(
                    "not-held",
                    "a heartbeat was answered 404 (released, expired or force-unlocked)",
                    error.problem if error else None,
                    error.status if error else None,
                )
            elif now() >= self._clock.deadline:
                self._set_lost("expired", f"the lease ended before a heartbeat succeeded (last: {error})")
                verdict = Beat.LOST
            else:
                self._clock.failed(error.retry_after_ms if error else None)
                log.debug("latchkey: heartbeat of %r failed, retrying: %s", self, error)
        return verdict, error

    def _renew_loop(self) -> None:
        try:
            while True:
                with self._mutex:
                    wake = min(self._clock.next_beat, self._clock.deadline)
                if self._stop.wait(max(0.0, wake - now())):
                    return
                with self._mutex:
                    t = now()
                    if t >= self._clock.deadline:
                        self._set_lost("expired", "the lease ended before a heartbeat succeeded")
                        return
                    if t < self._clock.next_beat:
                        continue
                verdict, _ = self._beat(None)
                if verdict == Beat.LOST or self._stop.is_set():
                    return
        except BaseException as exc:  # noqa: BLE001 - keep the thread's failure visible
            with self._mutex:
                self._set_lost("renewer-failed", f"the renewing thread failed: {exc!r}")

    def renew(self, lease_ms: Optional[int] = None) -> G:
        """Heartbeat now (with ``lease_ms``: that becomes the lease).
        The background renewal continues either way."""
        if self._released:
            raise LatchkeyError(f"{self._op.label()}: already released")
        verdict, error = self._beat(lease_ms)
        if verdict == Beat.OK:
            return self.grant
        if verdict == Beat.LOST:
            raise self._lost_error()
        assert error is not None
        raise error

    def _stop_renewing(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread() and self._thread.is_alive():
            self._thread.join()

    # --- release -----------------------------------------------------------------

    def release(self) -> Optional[Dict[str, Any]]:
        """Stop renewing and release the hold (one reentrant hold).

        Returns the service's answer, or ``None`` if the hold was already
        known to be lost (and is not held any more) or already released.
        Raises ``HoldLost`` if the service says it was not held although
        the client did not know it was lost."""
        with self._mutex:
            if self._released:
                return None
            self._released = True
        self._stop_renewing()
        self._client._untrack(self)
        with self._mutex:
            holder = self._grant.holder
        answer = self._client._perform(self._op.release_call(holder))
        if isinstance(answer, Answer) and answer.status == 200:
            result: Dict[str, Any] = answer.data
            return result
        if isinstance(answer, Answer) and answer.status == 404:
            with self._mutex:
                if self.lost.is_set():
                    return None
                status, problem, _ = problem_of(answer)
                self._set_lost("not-held", "it was not held any more when released", problem, status)
            raise self._lost_error()
        raise_for(answer)
        raise AssertionError("unreachable")  # pragma: no cover

    def __enter__(self: "_HoldSelf") -> "_HoldSelf":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        _finish(self, exc_type)

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else ("released" if self._released else "held")
        describe = getattr(self, "_describe", lambda: "")
        return f"<{type(self).__name__} {self._op.kind} {describe()} {state}>"


_HoldSelf = TypeVar("_HoldSelf", bound="_SyncHold[Any]")


def _finish(hold: "_SyncHold[Any]", exc_type: Optional[Type[BaseException]]) -> None:
    """A ``with`` block's exit: release; raise ``HoldLost`` if the hold was
    lost during the block, unless the block raised (its exception wins)."""
    body_failed = exc_type is not None
    try:
        hold.release()
    except HoldLost:
        if not body_failed:
            raise
        return
    except Exception as error:
        if not body_failed:
            raise
        log.warning("latchkey: releasing %r failed: %s", hold, error)
        return
    if not body_failed and hold.lost.is_set():
        raise hold._lost_error()


class Hold(SingleGrantView, _SyncHold[Grant]):
    """A live single-object hold (lock, fair lock, rwlock, semaphore
    permits, RedLock): ``fencing_token``, ``holder``, ``lease_ms``, ... of
    its latest grant, ``lost``, ``check()``, ``renew()``, ``release()``."""

    @property
    def grant(self) -> Grant:
        with self._mutex:
            return self._grant


class MultiHold(MultiGrantView, _SyncHold[MultiGrant]):
    """A live multi-lock hold: ``fencing_tokens`` by name, ``holder``, ..."""

    @property
    def grant(self) -> MultiGrant:
        with self._mutex:
            return self._grant


class Acquisition(Generic[H]):
    """A hold to take: use it in ``with`` (it releases on every exit
    path), or call ``acquire()`` and later ``release()`` on the result."""

    def __init__(
        self,
        client: "Client",
        op: HoldOp[Any],
        make: Callable[..., H],
        *,
        holder: Optional[str],
        lease_ms: Optional[int],
        wait_ms: int,
        on_waiting: Optional[WaitingCallback],
        heartbeat_interval_ms: Optional[int],
    ) -> None:
        self._client = client
        self._op = op
        self._make: Callable[..., H] = make
        self._holder = holder
        self._lease_ms = lease_ms
        self._wait_ms = int(wait_ms)
        self._on_waiting = on_waiting
        self._interval = heartbeat_interval_ms
        self._entered: List[H] = []

    def acquire(self) -> H:
        """Take the hold, waiting up to ``wait_ms`` in total; raises
        ``NotAcquired`` when the wait ends without it. A wait on a fair
        lock, rwlock or semaphore that gives up (it runs out, raises or
        is interrupted) leaves its queue before the exception goes on."""
        holder = wait_holder(self._holder, self._wait_ms)
        try:
            grant, sent, received = self._client._run(
                acquire_flow(
                    self._op,
                    holder=holder,
                    lease_ms=self._lease_ms,
                    wait_ms=self._wait_ms,
                    limits=self._client._limits,
                    on_waiting=self._on_waiting,
                )
            )
        except BaseException:
            self._client._leave(leave_call(self._op, holder, self._wait_ms))
            raise
        return self._make(self._client, self._op, grant, sent, self._interval, received)

    def __enter__(self) -> H:
        hold = self.acquire()
        self._entered.append(hold)
        return hold

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        _finish(self._entered.pop(), exc_type)

    def __repr__(self) -> str:
        return f"<Acquisition {self._op.label()} wait_ms={self._wait_ms}>"


class Semaphore:
    """A semaphore's configuration and state (``client.semaphore(name)``);
    take permits with ``client.semaphore_permits(name, permits=k)``."""

    def __init__(self, client: "Client", name: str) -> None:
        self._client = client
        self.name = name
        self._path = f"/semaphores/{seg(name)}"

    def configure(self, permits: int) -> SemaphoreState:
        """Set the number of permits (creating the semaphore). Lowering it
        never revokes live holds."""
        result: SemaphoreState = self._client._run(
            single(HttpCall("PUT", self._path, json={"permits": permits}))
        )
        return result

    def state(self) -> SemaphoreState:
        """Raises ``NotFound`` if never configured."""
        result: SemaphoreState = self._client._run(single(HttpCall("GET", self._path)))
        return result

    def delete(self) -> bool:
        """Drop the configuration and every hold (open waits end with
        ``NotFound``); true if it existed. The fencing counter stays."""
        result = self._client._run(single(HttpCall("DELETE", self._path)))
        return bool(result.get("deleted", False)) if isinstance(result, dict) else False

    def __repr__(self) -> str:
        return f"<Semaphore {self.name!r}>"


class Latch:
    """A count-down latch (``client.latch(name)``)."""

    def __init__(self, client: "Client", name: str) -> None:
        self._client = client
        self.name = name
        self._path = f"/latches/{seg(name)}"

    def set(self, count: int, ttl_ms: Optional[int] = None) -> LatchState:
        """Close the latch with ``count``; raises ``LatchExists`` while it is
        closed. ``ttl_ms`` bounds its life."""
        body: Dict[str, Any] = {"count": count}
        if ttl_ms is not None:
            body["ttl_ms"] = ttl_ms
        result: LatchState = self._client._run(
            single(HttpCall("PUT", self._path, json=body), ok=(200, 201))
        )
        return result

    def count_down(self, by: int = 1, idempotency_key: Optional[str] = None) -> LatchState:
        """Count down by ``by``; ``{"count", "open"}``. Sent with an
        ``Idempotency-Key`` (a new uuid4 unless given) and repeated once
        with the same key if no answer came, so it counts once. Raises
        ``NotFound`` when there is no closed latch of that name."""
        return self._client._run(count_down_flow(self.name, by, idempotency_key))

    def wait(self, wait_ms: int, on_count: Optional[WaitingCallback] = None) -> LatchState:
        """Wait up to ``wait_ms`` in total for the latch to open; returns
        ``{"count", "open"}`` (``open`` false when the wait ran out).
        With ``on_count``, streams events and calls it with every
        ``{"count", "open"}`` change."""
        return self._client._run(
            latch_wait_flow(self.name, wait_ms=int(wait_ms), limits=self._client._limits, on_count=on_count)
        )

    def state(self) -> LatchState:
        """``{"name", "count", "open"}``; a missing latch is open, count 0."""
        result: LatchState = self._client._run(single(HttpCall("GET", self._path)))
        return result

    def delete(self) -> bool:
        """Delete (open) the latch; false if it was already open."""
        result = self._client._run(single(HttpCall("DELETE", self._path)))
        return bool(result.get("deleted", False)) if isinstance(result, dict) else False

    def __repr__(self) -> str:
        return f"<Latch {self.name!r}>"


class Client:
    """A synchronous latchkey client.

    ``url`` defaults to ``$LATCHKEY_URL``, then ``http://127.0.0.1:8080``;
    ``api_key`` (for a service with API keys configured) to
    ``$LATCHKEY_API_KEY``, then none. ``owner`` labels every hold it takes
    (shown in state reads and in refusals' ``held_by``; not a secret):
    ``"<host> pid <pid> <program>"`` by default, ``""`` for none, and any
    acquire may name its own; control characters become spaces and it is
    cut to 200 bytes. ``timeout`` (seconds) bounds each request beyond the time the service
    is asked to wait. Use it as a context manager, or call ``close()``.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        *,
        api_key: Optional[str] = None,
        timeout: float = 10.0,
        owner: Optional[str] = None,
    ) -> None:
        self.url = resolve_url(url)
        self._timeout = float(timeout)
        self._owner = clean_owner(default_owner() if owner is None else owner)
        self._http = httpx.Client(
            base_url=self.url,
            timeout=client_timeout(self._timeout),
            limits=http_limits(),
            headers=auth_headers(api_key),
        )
        self._limits = ServerLimits()
        self._holds_mutex = threading.Lock()
        self._holds: "Dict[int, _SyncHold[Any]]" = {}

    # --- lifecycle ---------------------------------------------------------------

    def close(self) -> None:
        """Stop renewing the holds still open (their leases then lapse) and
        close the connections."""
        with self._holds_mutex:
            holds = list(self._holds.values())
            self._holds.clear()
        for hold in holds:
            hold._stop_renewing()
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<latchkey.Client {self.url}>"

    def _track(self, hold: "_SyncHold[Any]") -> None:
        with self._holds_mutex:
            self._holds[id(hold)] = hold

    def _untrack(self, hold: "_SyncHold[Any]") -> None:
        with self._holds_mutex:
            self._holds.pop(id(hold), None)

    # --- holds ---------------------------------------------------------------------

    def lock(
        self,
        name: str,
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[WaitingCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> Acquisition[Hold]:
        """A reentrant lock (``/locks/{name}``)."""
        return self._acquisition(
            SingleOp("lock", "/locks", name), Hold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner
        )

    def fair_lock(
        self,
        name: str,
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[WaitingCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> Acquisition[Hold]:
        """A fair lock (``/fair-locks/{name}``): granted in arrival order;
        ``on_waiting`` events carry ``position``."""
        return self._acquisition(
            SingleOp("fair-lock", "/fair-locks", name),
            Hold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner,
        )

    def read_lock(
        self,
        name: str,
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[WaitingCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> Acquisition[Hold]:
        """The read side of a read-write lock (``/rwlocks/{name}``)."""
        op = SingleOp("read-lock", "/rwlocks", name, "/read/acquire", release_params={"mode": "read"})
        return self._acquisition(op, Hold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner)

    def write_lock(
        self,
        name: str,
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[WaitingCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> Acquisition[Hold]:
        """The write side of a read-write lock (``/rwlocks/{name}``)."""
        op = SingleOp("write-lock", "/rwlocks", name, "/write/acquire", release_params={"mode": "write"})
        return self._acquisition(op, Hold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner)

    def semaphore_permits(
        self,
        name: str,
        permits: int = 1,
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[WaitingCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> Acquisition[Hold]:
        """``permits`` of a configured semaphore (``/semaphores/{name}``),
        all under one lease; the release gives all of them back."""
        op = SingleOp("semaphore", "/semaphores", name, extra={"permits": permits})
        return self._acquisition(op, Hold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner)

    def multi_lock(
        self,
        names: Sequence[str],
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[WaitingCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> Acquisition[MultiHold]:
        """A set of locks (the same locks as ``lock(name)``), all or nothing."""
        return self._acquisition(
            MultiOp(names), MultiHold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner
        )

    def redlock(
        self,
        name: str,
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[WaitingCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> Acquisition[Hold]:
        """A RedLock over the service's independent Redis nodes
        (``/redlocks/{name}``). Its lease counts from ``validity_ms``."""
        return self._acquisition(
            SingleOp("redlock", "/redlocks", name), Hold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner
        )

    def _acquisition(
        self,
        op: HoldOp[Any],
        make: Callable[..., H],
        holder: Optional[str],
        lease_ms: Optional[int],
        wait_ms: int,
        on_waiting: Optional[WaitingCallback],
        heartbeat_interval_ms: Optional[int],
        owner: Optional[str] = None,
    ) -> Acquisition[H]:
        op.owner = self._owner if owner is None else clean_owner(owner)
        return Acquisition(
            self,
            op,
            make,
            holder=holder,
            lease_ms=lease_ms,
            wait_ms=wait_ms,
            on_waiting=on_waiting,
            heartbeat_interval_ms=heartbeat_interval_ms,
        )

    # --- objects -------------------------------------------------------------------

    def semaphore(self, name: str) -> Semaphore:
        return Semaphore(self, name)

    def latch(self, name: str) -> Latch:
        return Latch(self, name)

    # --- state and force unlock ----------------------------------------------------

    def lock_state(self, name: str) -> LockState:
        result: LockState = self._run(single(HttpCall("GET", f"/locks/{seg(name)}")))
        return result

    def fair_lock_state(self, name: str) -> LockState:
        result: LockState = self._run(single(HttpCall("GET", f"/fair-locks/{seg(name)}")))
        return result

    def rwlock_state(self, name: str) -> RwLockState:
        result: RwLockState = self._run(single(HttpCall("GET", f"/rwlocks/{seg(name)}")))
        return result

    def redlock_state(self, name: str) -> RedlockState:
        result: RedlockState = self._run(single(HttpCall("GET", f"/redlocks/{seg(name)}")))
        return result

    def force_unlock(self, name: str) -> bool:
        """Free ``/locks/{name}`` whoever holds it (wakes waiters); true if
        it was held."""
        return self._force(f"/locks/{seg(name)}")

    def force_unlock_fair_lock(self, name: str) -> bool:
        return self._force(f"/fair-locks/{seg(name)}")

    def force_unlock_rwlock(self, name: str) -> bool:
        return self._force(f"/rwlocks/{seg(name)}")

    def _force(self, path: str) -> bool:
        result = self._run(single(HttpCall("DELETE", path)))
        return bool(result.get("released", False)) if isinstance(result, dict) else False

    # --- I/O --------------------------------------------------------------------------

    def _run(self, flow: Flow[T]) -> T:
        try:
            action = next(flow)
            while True:
                outcome: Outcome
                if isinstance(action, Sleep):
                    time.sleep(max(0.0, action.seconds))
                    outcome = None
                else:
                    outcome = self._perform(action)
                action = flow.send(outcome)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            flow.close()

    def _leave(self, call: Optional[HttpCall]) -> None:
        """Best effort, for a wait that gave up: sends ``call`` (see
        ``leave_call``) once, within the client's ``timeout``; what comes
        of it (404 when nothing was left, no answer) is only logged, at
        debug level. Another interrupt cuts it short."""
        if call is None:
            return
        try:
            answer: Outcome = self._perform(call)
        except Exception as error:  # noqa: BLE001 - best effort
            answer = NoAnswer(error)
        log.debug("latchkey: a wait that gave up left its queue: %s", _leave_outcome(answer))

    def _perform(self, call: HttpCall) -> Outcome:
        headers = {"Accept": "application/json"}
        headers.update(call.headers)
        kwargs: Dict[str, Any] = {}
        if call.json is not NO_BODY:
            kwargs["json"] = call.json
        timeout = client_timeout(self._timeout, call.server_wait_ms, call.deadline_s)
        try:
            if call.sse is None:
                response = self._http.request(
                    call.method, call.path, params=call.params, headers=headers, timeout=timeout, **kwargs
                )
                return Answer(response.status_code, response.headers, _json(response))
            headers["Accept"] = "text/event-stream"
            with self._http.stream(
                call.method, call.path, params=call.params, headers=headers, timeout=timeout, **kwargs
            ) as response:
                content_type = response.headers.get("content-type", "")
                if response.status_code != 200 or not content_type.startswith("text/event-stream"):
                    response.read()
                    return Answer(response.status_code, response.headers, _json(response))
                decoder = SseDecoder()
                for line in response.iter_lines():
                    event = decoder.feed(line)
                    if event is None:
                        continue
                    kind, data = event[0], _json_text(event[1])
                    if kind in call.sse.final:
                        return SseFinal(kind, data)
                    call.sse.on_event(kind, data)
                return NoAnswer(EOFError("the event stream ended without a final event"))
        except httpx.TransportError as error:
            return NoAnswer(error)


def _leave_outcome(answer: Outcome) -> str:
    """What came of a leave, for the log (never the holder id)."""
    if isinstance(answer, Answer):
        return f"answered {answer.status}"
    if isinstance(answer, NoAnswer):
        return f"no answer ({answer.error!r})"
    return repr(answer)


def _json(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _json_text(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
