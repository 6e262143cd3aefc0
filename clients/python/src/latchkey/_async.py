"""The asyncio client: ``AsyncClient``."""

from __future__ import annotations

import asyncio
import inspect
import logging
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
from ._sync import _json, _json_text, _leave_outcome
from ._views import MultiGrantView, SingleGrantView

log = logging.getLogger("latchkey")

T = TypeVar("T")
AH = TypeVar("AH", "AsyncHold", "AsyncMultiHold")

# Called with each event's data; may be a plain function or a coroutine
# function.
EventCallback = Callable[[Dict[str, Any]], Any]


class _AsyncHold(Generic[G]):
    """A hold that an asyncio task renews until it is released."""

    def __init__(
        self,
        client: "AsyncClient",
        op: HoldOp[G],
        grant: G,
        sent_at: float,
        heartbeat_interval_ms: Optional[int],
        received_at: Optional[float] = None,
    ) -> None:
        self._client = client
        self._op: HoldOp[G] = op
        self._grant: G = grant
        self._clock = LeaseClock(grant, sent_at, heartbeat_interval_ms, received_at)
        self._lost_info: Optional[Tuple[str, str, Optional[Problem], Optional[int]]] = None
        self._released = False
        self._stopping = False
        #: Set when the hold is lost (see ``check``); ``await hold.lost.wait()``.
        self.lost = asyncio.Event()
        client._track(self)
        self._task: "asyncio.Task[None]" = asyncio.get_running_loop().create_task(self._renew_loop())

    # --- state ---------------------------------------------------------------

    @property
    def held(self) -> bool:
        """Neither released nor known to be lost."""
        return not self._released and not self.lost.is_set()

    @property
    def lost_reason(self) -> Optional[str]:
        info = self._lost_info
        return info[0] if info else None

    def check(self) -> None:
        """Raise ``HoldLost`` if the hold is lost: the service said it is
        not held, or no heartbeat succeeded before the lease ended by this
        process's clock. Call it before acting on what the hold protects."""
        if not self.lost.is_set() and not self._released and now() >= self._clock.deadline:
            self._set_lost("expired", "the lease ended before a heartbeat succeeded")
        if self.lost.is_set():
            raise self._lost_error()

    # --- renewal ---------------------------------------------------------------

    def _set_lost(self, reason: str, message: str, problem: Optional[Problem] = None, status: Optional[int] = None) -> None:
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

    async def _beat(self, lease_ms: Optional[int]) -> Tuple[str, Optional[LatchkeyError]]:
        left = self._clock.deadline - now()
        if left <= 0:
            self._set_lost("expired", "the lease ended before a heartbeat succeeded")
            return Beat.LOST, None
        call = self._op.heartbeat_call(self._grant.holder, lease_ms)
        call.deadline_s = left
        sent = now()
        answer: Outcome
        try:
            answer = await asyncio.wait_for(self._client._perform(call), timeout=left)
        except asyncio.TimeoutError as timed_out:
            answer = NoAnswer(timed_out)
        verdict, grant, error = judge_heartbeat(self._op, answer)
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

    async def _renew_loop(self) -> None:
        try:
            while not self._stopping:
                wake = min(self._clock.next_beat, self._clock.deadline)
                await asyncio.sleep(max(0.0, wake - now()))
                if self._stopping:
                    return
                t = now()
                if t >= self._clock.deadline:
                    self._set_lost("expired", "the lease ended before a heartbeat succeeded")
                    return
                if t < self._clock.next_beat:
                    continue
                verdict, _ = await self._beat(None)
                if verdict == Beat.LOST:
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - keep the task's failure visible
            self._set_lost("renewer-failed", f"the renewing task failed: {exc!r}")

    async def renew(self, lease_ms: Optional[int] = None) -> G:
        """Heartbeat now (with ``lease_ms``: that becomes the lease)."""
        if self._released:
            raise LatchkeyError(f"{self._op.label()}: already released")
        verdict, error = await self._beat(lease_ms)
        if verdict == Beat.OK:
            return self._grant
        if verdict == Beat.LOST:
            raise self._lost_error()
        assert error is not None
        raise error

    async def _stop_renewing(self) -> None:
        # The flag as well as the cancellation: asyncio.wait_for (in
        # _beat) can swallow a cancellation that arrives as the heartbeat
        # completes, and the loop would then go on renewing.
        self._stopping = True
        task = self._task
        if task.done() or task is asyncio.current_task():
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    # --- release -----------------------------------------------------------------

    async def release(self) -> Optional[Dict[str, Any]]:
        """Stop renewing and release the hold (one reentrant hold).

        Returns the service's answer, or ``None`` if the hold was already
        known to be lost or already released. Raises ``HoldLost`` if the
        service says it was not held although the client did not know."""
        if self._released:
            return None
        self._released = True
        await self._stop_renewing()
        self._client._untrack(self)
        answer = await self._client._perform(self._op.release_call(self._grant.holder))
        if isinstance(answer, Answer) and answer.status == 200:
            result: Dict[str, Any] = answer.data
            return result
        if isinstance(answer, Answer) and answer.status == 404:
            if self.lost.is_set():
                return None
            status, problem, _ = problem_of(answer)
            self._set_lost("not-held", "it was not held any more when released", problem, status)
            raise self._lost_error()
        raise_for(answer)
        raise AssertionError("unreachable")  # pragma: no cover

    async def __aenter__(self: "_AHoldSelf") -> "_AHoldSelf":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await _finish(self, exc_type)

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else ("released" if self._released else "held")
        describe = getattr(self, "_describe", lambda: "")
        return f"<{type(self).__name__} {self._op.kind} {describe()} {state}>"


_AHoldSelf = TypeVar("_AHoldSelf", bound="_AsyncHold[Any]")


async def _finish(hold: "_AsyncHold[Any]", exc_type: Optional[Type[BaseException]]) -> None:
    body_failed = exc_type is not None
    try:
        await hold.release()
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


class AsyncHold(SingleGrantView, _AsyncHold[Grant]):
    """A live single-object hold (asyncio); see ``latchkey.Hold``."""

    @property
    def grant(self) -> Grant:
        return self._grant


class AsyncMultiHold(MultiGrantView, _AsyncHold[MultiGrant]):
    """A live multi-lock hold (asyncio)."""

    @property
    def grant(self) -> MultiGrant:
        return self._grant


class AsyncAcquisition(Generic[AH]):
    """A hold to take: ``async with`` it, or ``await .acquire()`` and later
    ``await hold.release()``."""

    def __init__(
        self,
        client: "AsyncClient",
        op: HoldOp[Any],
        make: Callable[..., AH],
        *,
        holder: Optional[str],
        lease_ms: Optional[int],
        wait_ms: int,
        on_waiting: Optional[EventCallback],
        heartbeat_interval_ms: Optional[int],
    ) -> None:
        self._client = client
        self._op = op
        self._make: Callable[..., AH] = make
        self._holder = holder
        self._lease_ms = lease_ms
        self._wait_ms = int(wait_ms)
        self._on_waiting = on_waiting
        self._interval = heartbeat_interval_ms
        self._entered: List[AH] = []

    async def acquire(self) -> AH:
        """Take the hold, waiting up to ``wait_ms`` in total; raises
        ``NotAcquired`` when the wait ends without it. A wait on a fair
        lock, rwlock or semaphore that gives up (it runs out, raises or
        is cancelled) leaves its queue before the exception goes on."""
        holder = wait_holder(self._holder, self._wait_ms)
        try:
            grant, sent, received = await self._client._run(
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
            await self._client._leave(leave_call(self._op, holder, self._wait_ms))
            raise
        return self._make(self._client, self._op, grant, sent, self._interval, received)

    async def __aenter__(self) -> AH:
        hold = await self.acquire()
        self._entered.append(hold)
        return hold

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await _finish(self._entered.pop(), exc_type)

    def __repr__(self) -> str:
        return f"<AsyncAcquisition {self._op.label()} wait_ms={self._wait_ms}>"


class AsyncSemaphore:
    """A semaphore's configuration and state (``client.semaphore(name)``)."""

    def __init__(self, client: "AsyncClient", name: str) -> None:
        self._client = client
        self.name = name
        self._path = f"/semaphores/{seg(name)}"

    async def configure(self, permits: int) -> SemaphoreState:
        result: SemaphoreState = await self._client._run(
            single(HttpCall("PUT", self._path, json={"permits": permits}))
        )
        return result

    async def state(self) -> SemaphoreState:
        result: SemaphoreState = await self._client._run(single(HttpCall("GET", self._path)))
        return result

    async def delete(self) -> bool:
        """Drop the configuration and every hold (open waits end with
        ``NotFound``); true if it existed. The fencing counter stays."""
        result = await self._client._run(single(HttpCall("DELETE", self._path)))
        return bool(result.get("deleted", False)) if isinstance(result, dict) else False

    def __repr__(self) -> str:
        return f"<AsyncSemaphore {self.name!r}>"


class AsyncLatch:
    """A count-down latch (``client.latch(name)``); see ``latchkey.Latch``."""

    def __init__(self, client: "AsyncClient", name: str) -> None:
        self._client = client
        self.name = name
        self._path = f"/latches/{seg(name)}"

    async def set(self, count: int, ttl_ms: Optional[int] = None) -> LatchState:
        body: Dict[str, Any] = {"count": count}
        if ttl_ms is not None:
            body["ttl_ms"] = ttl_ms
        result: LatchState = await self._client._run(
            single(HttpCall("PUT", self._path, json=body), ok=(200, 201))
        )
        return result

    async def count_down(self, by: int = 1, idempotency_key: Optional[str] = None) -> LatchState:
        return await self._client._run(count_down_flow(self.name, by, idempotency_key))

    async def wait(self, wait_ms: int, on_count: Optional[EventCallback] = None) -> LatchState:
        return await self._client._run(
            latch_wait_flow(self.name, wait_ms=int(wait_ms), limits=self._client._limits, on_count=on_count)
        )

    async def state(self) -> LatchState:
        result: LatchState = await self._client._run(single(HttpCall("GET", self._path)))
        return result

    async def delete(self) -> bool:
        result = await self._client._run(single(HttpCall("DELETE", self._path)))
        return bool(result.get("deleted", False)) if isinstance(result, dict) else False

    def __repr__(self) -> str:
        return f"<AsyncLatch {self.name!r}>"


class AsyncClient:
    """An asyncio latchkey client; the same API as ``latchkey.Client`` with
    ``async with`` / ``await``. Use it as an async context manager, or call
    ``await aclose()``."""

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
        self._http = httpx.AsyncClient(
            base_url=self.url,
            timeout=client_timeout(self._timeout),
            limits=http_limits(),
            headers=auth_headers(api_key),
        )
        self._limits = ServerLimits()
        self._holds: "Dict[int, _AsyncHold[Any]]" = {}

    async def aclose(self) -> None:
        """Stop renewing the holds still open (their leases then lapse) and
        close the connections."""
        holds = list(self._holds.values())
        self._holds.clear()
        for hold in holds:
            await hold._stop_renewing()
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<latchkey.AsyncClient {self.url}>"

    def _track(self, hold: "_AsyncHold[Any]") -> None:
        self._holds[id(hold)] = hold

    def _untrack(self, hold: "_AsyncHold[Any]") -> None:
        self._holds.pop(id(hold), None)

    # --- holds ---------------------------------------------------------------------

    def lock(
        self,
        name: str,
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[EventCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> AsyncAcquisition[AsyncHold]:
        """A reentrant lock (``/locks/{name}``)."""
        return self._acquisition(
            SingleOp("lock", "/locks", name), AsyncHold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner
        )

    def fair_lock(
        self,
        name: str,
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[EventCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> AsyncAcquisition[AsyncHold]:
        """A fair lock (``/fair-locks/{name}``)."""
        return self._acquisition(
            SingleOp("fair-lock", "/fair-locks", name),
            AsyncHold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner,
        )

    def read_lock(
        self,
        name: str,
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[EventCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> AsyncAcquisition[AsyncHold]:
        """The read side of a read-write lock (``/rwlocks/{name}``)."""
        op = SingleOp("read-lock", "/rwlocks", name, "/read/acquire", release_params={"mode": "read"})
        return self._acquisition(op, AsyncHold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner)

    def write_lock(
        self,
        name: str,
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[EventCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> AsyncAcquisition[AsyncHold]:
        """The write side of a read-write lock (``/rwlocks/{name}``)."""
        op = SingleOp("write-lock", "/rwlocks", name, "/write/acquire", release_params={"mode": "write"})
        return self._acquisition(op, AsyncHold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner)

    def semaphore_permits(
        self,
        name: str,
        permits: int = 1,
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[EventCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> AsyncAcquisition[AsyncHold]:
        """``permits`` of a configured semaphore (``/semaphores/{name}``)."""
        op = SingleOp("semaphore", "/semaphores", name, extra={"permits": permits})
        return self._acquisition(op, AsyncHold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner)

    def multi_lock(
        self,
        names: Sequence[str],
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[EventCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> AsyncAcquisition[AsyncMultiHold]:
        """A set of locks, all or nothing."""
        return self._acquisition(
            MultiOp(names), AsyncMultiHold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner
        )

    def redlock(
        self,
        name: str,
        *,
        lease_ms: Optional[int] = None,
        wait_ms: int = 0,
        holder: Optional[str] = None,
        on_waiting: Optional[EventCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> AsyncAcquisition[AsyncHold]:
        """A RedLock (``/redlocks/{name}``)."""
        return self._acquisition(
            SingleOp("redlock", "/redlocks", name), AsyncHold, holder, lease_ms, wait_ms, on_waiting,
            heartbeat_interval_ms, owner,
        )

    def _acquisition(
        self,
        op: HoldOp[Any],
        make: Callable[..., AH],
        holder: Optional[str],
        lease_ms: Optional[int],
        wait_ms: int,
        on_waiting: Optional[EventCallback],
        heartbeat_interval_ms: Optional[int],
        owner: Optional[str] = None,
    ) -> AsyncAcquisition[AH]:
        op.owner = self._owner if owner is None else clean_owner(owner)
        return AsyncAcquisition(
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

    def semaphore(self, name: str) -> AsyncSemaphore:
        return AsyncSemaphore(self, name)

    def latch(self, name: str) -> AsyncLatch:
        return AsyncLatch(self, name)

    # --- state and force unlock ----------------------------------------------------

    async def lock_state(self, name: str) -> LockState:
        result: LockState = await self._run(single(HttpCall("GET", f"/locks/{seg(name)}")))
        return result

    async def fair_lock_state(self, name: str) -> LockState:
        result: LockState = await self._run(single(HttpCall("GET", f"/fair-locks/{seg(name)}")))
        return result

    async def rwlock_state(self, name: str) -> RwLockState:
        result: RwLockState = await self._run(single(HttpCall("GET", f"/rwlocks/{seg(name)}")))
        return result

    async def redlock_state(self, name: str) -> RedlockState:
        result: RedlockState = await self._run(single(HttpCall("GET", f"/redlocks/{seg(name)}")))
        return result

    async def force_unlock(self, name: str) -> bool:
        return await self._force(f"/locks/{seg(name)}")

    async def force_unlock_fair_lock(self, name: str) -> bool:
        return await self._force(f"/fair-locks/{seg(name)}")

    async def force_unlock_rwlock(self, name: str) -> bool:
        return await self._force(f"/rwlocks/{seg(name)}")

    async def _force(self, path: str) -> bool:
        result = await self._run(single(HttpCall("DELETE", path)))
        return bool(result.get("released", False)) if isinstance(result, dict) else False

    # --- I/O --------------------------------------------------------------------------

    async def _run(self, flow: Flow[T]) -> T:
        try:
            action = next(flow)
            while True:
                outcome: Outcome
                if isinstance(action, Sleep):
                    await asyncio.sleep(max(0.0, action.seconds))
                    outcome = None
                else:
                    outcome = await self._perform(action)
                action = flow.send(outcome)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            flow.close()

    async def _leave(self, call: Optional[HttpCall]) -> None:
        """Best effort, for a wait that gave up: sends ``call`` (see
        ``leave_call``) once, within the client's ``timeout``; what comes
        of it (404 when nothing was left, no answer) is only logged, at
        debug level. Cancelling the task again cuts it short."""
        if call is None:
            return
        answer: Outcome
        try:
            answer = await asyncio.wait_for(self._perform(call), self._timeout)
        except Exception as error:  # noqa: BLE001 - best effort (TimeoutError too)
            answer = NoAnswer(error)
        log.debug("latchkey: a wait that gave up left its queue: %s", _leave_outcome(answer))

    async def _perform(self, call: HttpCall) -> Outcome:
        headers = {"Accept": "application/json"}
        headers.update(call.headers)
        kwargs: Dict[str, Any] = {}
        if call.json is not NO_BODY:
            kwargs["json"] = call.json
        timeout = client_timeout(self._timeout, call.server_wait_ms, call.deadline_s)
        try:
            if call.sse is None:
                response = await self._http.request(
                    call.method, call.path, params=call.params, headers=headers, timeout=timeout, **kwargs
                )
                return Answer(response.status_code, response.headers, _json(response))
            headers["Accept"] = "text/event-stream"
            async with self._http.stream(
                call.method, call.path, params=call.params, headers=headers, timeout=timeout, **kwargs
            ) as response:
                content_type = response.headers.get("content-type", "")
                if response.status_code != 200 or not content_type.startswith("text/event-stream"):
                    await response.aread()
                    return Answer(response.status_code, response.headers, _json(response))
                decoder = SseDecoder()
                async for line in response.aiter_lines():
                    event = decoder.feed(line)
                    if event is None:
                        continue
                    kind, data = event[0], _json_text(event[1])
                    if kind in call.sse.final:
                        return SseFinal(kind, data)
                    result = call.sse.on_event(kind, data)
                    if inspect.isawaitable(result):
                        await result
                return NoAnswer(EOFError("the event stream ended without a final event"))
        except httpx.TransportError as error:
            return NoAnswer(error)
