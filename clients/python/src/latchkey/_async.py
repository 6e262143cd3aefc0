"""The client, written once as ``AsyncClient`` (asyncio) in ``_async.py``;
``Client`` (threads) in ``_sync.py`` is generated from it by
``scripts/gen_sync.py`` with unasync. What differs between the two (the
background renewal: an asyncio task or a daemon thread) is in
``_backend_async`` and ``_backend_sync``."""

from __future__ import annotations

import logging
from types import TracebackType
from typing import (
    Any,
    Callable,
    Dict,
    Generic,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
    TypeVar,
    Union,
)

import httpx

from ._backend_async import Event, Mutex, Renewer, bounded, resolve, sleep
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
    SessionOp,
    SingleOp,
    Sleep,
    SseDecoder,
    SseFinal,
    acquire_flow,
    count_down_flow,
    json_body,
    json_text,
    judge_heartbeat,
    latch_wait_flow,
    leave_call,
    leave_outcome,
    now,
    problem_of,
    raise_for,
    rate_acquire_flow,
    seg,
    single,
    wait_holder,
)
from ._errors import HoldLost, LatchkeyError, Problem
from ._models import (
    Grant,
    LatchState,
    Limit,
    LimitAcquired,
    LockState,
    MultiGrant,
    RateAcquired,
    RateLimiterState,
    RedlockState,
    RwLockState,
    SemaphoreState,
    SessionGrant,
    SessionState,
    short_holder,
)
from ._views import MultiGrantView, SingleGrantView

log = logging.getLogger("latchkey")

T = TypeVar("T")
AH = TypeVar("AH", "AsyncHold", "AsyncMultiHold", "AsyncSession")

# Called with each event's data; on ``AsyncClient`` it may also be a
# coroutine function.
EventCallback = Callable[[Dict[str, Any]], Any]

# A session to acquire in: the session object, or its id.
SessionArg = Union["AsyncSession", str, None]


class _Hold(Generic[G]):
    """A hold renewed in the background (a daemon thread, or an asyncio
    task on ``AsyncClient``) until it is released. A hold taken in a
    session has no renewal of its own: its session's renews it."""

    def __init__(
        self,
        client: "AsyncClient",
        op: HoldOp[G],
        grant: G,
        sent_at: float,
        heartbeat_interval_ms: Optional[int],
        received_at: Optional[float] = None,
        session: SessionArg = None,
    ) -> None:
        self._client = client
        self._op: HoldOp[G] = op
        self._grant: G = grant
        self._mutex = Mutex()
        self._clock = LeaseClock(grant, sent_at, heartbeat_interval_ms, received_at)
        self._lost_info: Optional[Tuple[str, str, Optional[Problem], Optional[int]]] = None
        self._released = False
        #: Set when the hold is lost (see ``check``): ``lost.wait(timeout)``
        #: on ``Client``, ``await lost.wait()`` on ``AsyncClient``.
        self.lost = Event()
        self._in_session = session is not None
        self._session = session if isinstance(session, AsyncSession) else None
        self._renewer: Optional[Renewer] = None
        client._track(self)
        if self._session is not None:
            self._session._attach(self)
        elif not self._in_session:
            self._renewer = Renewer(f"latchkey-renew {op.kind}", self._crashed)
            self._renewer.start(self._renew_loop)

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
        process's clock (for a hold taken in a session: its session's).
        Call it before acting on what the hold protects."""
        self._expire_if_due()
        if self.lost.is_set():
            raise self._lost_error()

    def _expire_if_due(self) -> None:
        if self._session is not None:
            self._session._expire_if_due()
        if self._in_session or self.lost.is_set():
            return
        with self._mutex:
            if not self._released and now() >= self._clock.deadline:
                self._set_lost("expired", "the lease ended before a heartbeat succeeded")

    # --- renewal ---------------------------------------------------------------

    def _set_lost(self, reason: str, message: str, problem: Optional[Problem] = None, status: Optional[int] = None) -> None:
        # Callers hold self._mutex, or own the hold's state exclusively.
        if self._lost_info is None:
            self._lost_info = (reason, message, problem, status)
            log.warning("latchkey: %r lost: %s", self, message)
            self.lost.set()

    def _crashed(self, exc: BaseException) -> None:
        with self._mutex:
            self._set_lost("renewer-failed", f"the renewal failed: {exc!r}")

    def _lost_error(self) -> HoldLost:
        assert self._lost_info is not None
        reason, message, problem, status = self._lost_info
        return HoldLost(
            f"{self._op.label()}: {self._op.noun} lost: {message}", reason=reason, problem=problem, status=status
        )

    async def _beat(self, lease_ms: Optional[int]) -> Tuple[str, Optional[LatchkeyError]]:
        with self._mutex:
            left = self._clock.deadline - now()
            holder = self._grant.holder
            if left <= 0 and not self._in_session:
                self._set_lost("expired", "the lease ended before a heartbeat succeeded")
                return Beat.LOST, None
        call = self._op.heartbeat_call(holder, lease_ms)
        call.deadline_s = left if left > 0 else None
        sent = now()
        answer = await bounded(self._client._perform(call), call.deadline_s)
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
            elif now() >= self._clock.deadline and not self._in_session:
                self._set_lost("expired", f"the lease ended before a heartbeat succeeded (last: {error})")
                verdict = Beat.LOST
            else:
                self._clock.failed(error.retry_after_ms if error else None)
                log.debug("latchkey: heartbeat of %r failed, retrying: %s", self, error)
        return verdict, error

    async def _renew_loop(self) -> None:
        renewer = self._renewer
        assert renewer is not None
        while True:
            with self._mutex:
                wake = min(self._clock.next_beat, self._clock.deadline)
            if await renewer.pause(wake - now()):
                return
            with self._mutex:
                t = now()
                if t >= self._clock.deadline:
                    self._set_lost("expired", "the lease ended before a heartbeat succeeded")
                    return
                if t < self._clock.next_beat:
                    continue
            verdict, _ = await self._beat(None)
            if verdict == Beat.LOST or renewer.stopping:
                return

    async def renew(self, lease_ms: Optional[int] = None) -> G:
        """Heartbeat now (with ``lease_ms``: that becomes the lease). The
        background renewal continues either way. (A hold taken in a
        session is renewed no further than its session's remaining TTL.)"""
        if self._released:
            raise LatchkeyError(f"{self._op.label()}: already released")
        verdict, error = await self._beat(lease_ms)
        if verdict == Beat.OK:
            return self.grant
        if verdict == Beat.LOST:
            raise self._lost_error()
        assert error is not None
        raise error

    async def _stop_renewing(self) -> None:
        if self._renewer is not None:
            await self._renewer.stop()

    # --- release -----------------------------------------------------------------

    async def release(self) -> Optional[Dict[str, Any]]:
        """Stop renewing and release the hold (one reentrant hold).

        Returns the service's answer, or ``None`` if the hold was already
        known to be lost (and is not held any more) or already released.
        Raises ``HoldLost`` if the service says it was not held although
        the client did not know it was lost."""
        with self._mutex:
            if self._released:
                return None
            self._released = True
        await self._stop_renewing()
        self._client._untrack(self)
        if self._session is not None:
            self._session._detach(self)
        with self._mutex:
            holder = self._grant.holder
        answer = await self._client._perform(self._op.release_call(holder))
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

    def _forget(self) -> None:
        """Released by someone else (its session's DELETE): nothing to send."""
        with self._mutex:
            self._released = True
        self._client._untrack(self)

    async def __aenter__(self: "_HoldSelf") -> "_HoldSelf":
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


_HoldSelf = TypeVar("_HoldSelf", bound="_Hold[Any]")


async def _finish(hold: "_Hold[Any]", exc_type: Optional[Type[BaseException]]) -> None:
    """A ``with`` block's exit: release; raise ``HoldLost`` if the hold was
    lost during the block, unless the block raised (its exception wins)."""
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


class AsyncHold(SingleGrantView, _Hold[Grant]):
    """A live single-object hold (lock, fair lock, rwlock, semaphore
    permits, RedLock): ``fencing_token``, ``holder``, ``lease_ms``, ... of
    its latest grant, ``lost``, ``check()``, ``renew()``, ``release()``."""

    @property
    def grant(self) -> Grant:
        with self._mutex:
            return self._grant


class AsyncMultiHold(MultiGrantView, _Hold[MultiGrant]):
    """A live multi-lock hold: ``fencing_tokens`` by name, ``holder``, ..."""

    @property
    def grant(self) -> MultiGrant:
        with self._mutex:
            return self._grant


class AsyncSession(_Hold[SessionGrant]):
    """A live session (``client.session(ttl_ms=...)``): renewed in the
    background every ``heartbeat_interval_ms`` like a hold, and every hold
    acquired with ``session=`` this session lives as long as it does. Its
    ``lost`` is set (and ``check()`` raises ``HoldLost``) when a heartbeat
    finds it gone (404: deleted, expired) or no heartbeat succeeded before
    its TTL ended; the holds taken in it are then lost too. ``release()``
    (the end of its ``with`` block) deletes it, which releases every hold
    taken in it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._holds_in: Set["_Hold[Any]"] = set()
        super().__init__(*args, **kwargs)

    @property
    def id(self) -> str:
        """The session id: a capability (whoever knows it can take holds
        in the session, renew and delete it). Don't log it."""
        return self.grant.session

    @property
    def ttl_ms(self) -> int:
        return self.grant.ttl_ms

    @property
    def heartbeat_interval_ms(self) -> int:
        return self.grant.heartbeat_interval_ms

    @property
    def holds(self) -> int:
        """The holds the last heartbeat renewed (0 after the creation)."""
        return self.grant.holds

    async def state(self) -> SessionState:
        """``GET /sessions/{id}``: ``ttl_ms``, ``expires_in_ms``, ``holds``."""
        result: SessionState = await self._client._run(single(HttpCall("GET", f"/sessions/{seg(self.id)}")))
        return result

    def _attach(self, hold: "_Hold[Any]") -> None:
        with self._mutex:
            self._holds_in.add(hold)
            lost = self._lost_info
        if lost is not None:
            with hold._mutex:
                hold._set_lost("session-lost", f"its session was lost: {lost[1]}", lost[2], lost[3])

    def _detach(self, hold: "_Hold[Any]") -> None:
        with self._mutex:
            self._holds_in.discard(hold)

    def _set_lost(self, reason: str, message: str, problem: Optional[Problem] = None, status: Optional[int] = None) -> None:
        # The holds first: whoever wakes on the session's ``lost`` finds
        # them lost too.
        if self._lost_info is None:
            for hold in list(self._holds_in):
                with hold._mutex:
                    hold._set_lost("session-lost", f"its session was lost: {message}", problem, status)
        super()._set_lost(reason, message, problem, status)

    async def release(self) -> Optional[Dict[str, Any]]:
        """Stop renewing and delete the session: the service releases every
        hold taken in it (``{"released": n}``, how many)."""
        try:
            return await super().release()
        finally:
            with self._mutex:
                holds, self._holds_in = list(self._holds_in), set()
            for hold in holds:
                hold._forget()

    def _describe(self) -> str:
        return f"id={short_holder(self.grant.session)!r}, ttl_ms={self.grant.ttl_ms}"


class AsyncAcquisition(Generic[AH]):
    """A hold to take: use it in ``with`` (it releases on every exit
    path), or call ``acquire()`` and later ``release()`` on the result."""

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
        session: SessionArg = None,
    ) -> None:
        self._client = client
        self._op = op
        self._make: Callable[..., AH] = make
        self._holder = holder
        self._lease_ms = lease_ms
        self._wait_ms = int(wait_ms)
        self._on_waiting = on_waiting
        self._interval = heartbeat_interval_ms
        self._session = session
        self._entered: List[AH] = []

    async def acquire(self) -> AH:
        """Take the hold, waiting up to ``wait_ms`` in total; raises
        ``NotAcquired`` when the wait ends without it. A wait on a fair
        lock, rwlock or semaphore that gives up (it runs out, raises or
        is interrupted) leaves its queue before the exception goes on."""
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
        return self._make(self._client, self._op, grant, sent, self._interval, received, self._session)

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
        return f"<{type(self).__name__} {self._op.label()} wait_ms={self._wait_ms}>"
class AsyncSemaphore:
    """A semaphore's configuration and state (``client.semaphore(name)``);
    take permits with ``client.semaphore_permits(name, permits=k)``."""

    def __init__(self, client: "AsyncClient", name: str) -> None:
        self._client = client
        self.name = name
        self._path = f"/semaphores/{seg(name)}"

    async def configure(self, permits: int) -> SemaphoreState:
        """Set the number of permits (creating the semaphore). Lowering it
        never revokes live holds."""
        result: SemaphoreState = await self._client._run(
            single(HttpCall("PUT", self._path, json={"permits": permits}))
        )
        return result

    async def state(self) -> SemaphoreState:
        """Raises ``NotFound`` if never configured."""
        result: SemaphoreState = await self._client._run(single(HttpCall("GET", self._path)))
        return result

    async def delete(self) -> bool:
        """Drop the configuration and every hold (open waits end with
        ``NotFound``); true if it existed. The fencing counter stays."""
        result = await self._client._run(single(HttpCall("DELETE", self._path)))
        return bool(result.get("deleted", False)) if isinstance(result, dict) else False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class AsyncLatch:
    """A count-down latch (``client.latch(name)``)."""

    def __init__(self, client: "AsyncClient", name: str) -> None:
        self._client = client
        self.name = name
        self._path = f"/latches/{seg(name)}"

    async def set(self, count: int, ttl_ms: Optional[int] = None) -> LatchState:
        """Close the latch with ``count``; raises ``LatchExists`` while it is
        closed. ``ttl_ms`` bounds its life."""
        body: Dict[str, Any] = {"count": count}
        if ttl_ms is not None:
            body["ttl_ms"] = ttl_ms
        result: LatchState = await self._client._run(
            single(HttpCall("PUT", self._path, json=body), ok=(200, 201))
        )
        return result

    async def count_down(self, by: int = 1, idempotency_key: Optional[str] = None) -> LatchState:
        """Count down by ``by``; ``{"count", "open"}``. Sent with an
        ``Idempotency-Key`` (a new uuid4 unless given) and repeated once
        with the same key if no answer came, so it counts once. Raises
        ``NotFound`` when there is no closed latch of that name."""
        return await self._client._run(count_down_flow(self.name, by, idempotency_key))

    async def wait(self, wait_ms: int, on_count: Optional[EventCallback] = None) -> LatchState:
        """Wait up to ``wait_ms`` in total for the latch to open; returns
        ``{"count", "open"}`` (``open`` false when the wait ran out).
        With ``on_count``, streams events and calls it with every
        ``{"count", "open"}`` change."""
        return await self._client._run(
            latch_wait_flow(self.name, wait_ms=int(wait_ms), limits=self._client._limits, on_count=on_count)
        )

    async def state(self) -> LatchState:
        """``{"name", "count", "open"}``; a missing latch is open, count 0."""
        result: LatchState = await self._client._run(single(HttpCall("GET", self._path)))
        return result

    async def delete(self) -> bool:
        """Delete (open) the latch; false if it was already open."""
        result = await self._client._run(single(HttpCall("DELETE", self._path)))
        return bool(result.get("deleted", False)) if isinstance(result, dict) else False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class AsyncRateLimiter:
    """A rate limiter (``client.rate_limiter(name)``): at most ``rate``
    permits per ``per_ms``, ``burst`` at once, per key (each ``key`` has
    its own bucket with the limiter's configuration) or in one shared
    bucket (no key)."""

    def __init__(self, client: "AsyncClient", name: str) -> None:
        self._client = client
        self.name = name
        self._path = f"/rate-limiters/{seg(name)}"

    async def configure(self, rate: int, per_ms: int, burst: Optional[int] = None) -> RateLimiterState:
        """Create or change the limiter (an admin operation on a service
        with API keys); a new rate applies at once, also to every key.
        ``burst`` defaults to ``rate``."""
        body: Dict[str, Any] = {"rate": rate, "per_ms": per_ms}
        if burst is not None:
            body["burst"] = burst
        result: RateLimiterState = await self._client._run(single(HttpCall("PUT", self._path, json=body)))
        return result

    async def state(self, key: Optional[str] = None) -> RateLimiterState:
        """The configuration and the permits ``available`` now (in
        ``key``'s bucket with ``key``); raises ``NotFound`` if never
        configured."""
        params = None if key is None else {"key": key}
        result: RateLimiterState = await self._client._run(single(HttpCall("GET", self._path, params=params)))
        return result

    async def delete(self) -> bool:
        """Delete the limiter (open waits end with ``NotFound``)."""
        result = await self._client._run(single(HttpCall("DELETE", self._path)))
        return bool(result.get("deleted", False)) if isinstance(result, dict) else False

    async def acquire(
        self,
        permits: int = 1,
        *,
        key: Optional[str] = None,
        wait_ms: int = 0,
        idempotency_key: Optional[str] = None,
        on_waiting: Optional[EventCallback] = None,
    ) -> RateAcquired:
        """Take ``permits`` (from ``key``'s own bucket with ``key``):
        ``{"permits", "available"}``. With ``wait_ms`` the permits are
        reserved when they come within it and the call returns when they
        are due; otherwise (and with ``wait_ms`` 0 when they are not there
        now) it raises ``RateLimited`` at once, whose ``retry_after_ms`` is
        exactly when they will be. ``idempotency_key``: a retry with the
        same key counts once (and the client repeats a request that got no
        answer once with it). ``on_waiting`` streams the wait's events."""
        body: Dict[str, Any] = {"permits": permits}
        if key is not None:
            body["key"] = key
        result: RateAcquired = await self._client._run(
            rate_acquire_flow(
                self._path + "/acquire",
                body,
                wait_ms=int(wait_ms),
                limits=self._client._limits,
                idempotency_key=idempotency_key,
                on_waiting=on_waiting,
            )
        )
        return result

    def limit(self, key: Optional[str] = None, permits: int = 1) -> Limit:
        """This limiter as one limit of ``client.acquire_limits([...])``."""
        return Limit(self.name, key, permits)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class AsyncClient:
    """A latchkey client (``Client``: threads; ``AsyncClient``: asyncio,
    with ``async with`` / ``await``).

    ``url`` defaults to ``$LATCHKEY_URL``, then ``http://127.0.0.1:8080``;
    ``api_key`` (for a service with API keys configured) to
    ``$LATCHKEY_API_KEY``, then none. ``owner`` labels every hold it takes
    (shown in state reads and in refusals' ``held_by``; not a secret):
    ``"<host> pid <pid> <program>"`` by default, ``""`` for none, and any
    acquire may name its own; control characters become spaces and it is
    cut to 200 bytes. ``timeout`` (seconds) bounds each request beyond the time the service
    is asked to wait. Use it as a context manager, or call ``close()`` (``await
    aclose()``).
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
        self._http = httpx.AsyncClient(
            base_url=self.url,
            timeout=client_timeout(self._timeout),
            limits=http_limits(),
            headers=auth_headers(api_key),
        )
        self._limits = ServerLimits()
        self._holds_mutex = Mutex()
        self._holds: "Dict[int, _Hold[Any]]" = {}

    async def aclose(self) -> None:
        """Stop renewing the holds still open (their leases then lapse) and
        close the connections."""
        with self._holds_mutex:
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
        return f"<latchkey.{type(self).__name__} {self.url}>"

    def _track(self, hold: "_Hold[Any]") -> None:
        with self._holds_mutex:
            self._holds[id(hold)] = hold

    def _untrack(self, hold: "_Hold[Any]") -> None:
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
        on_waiting: Optional[EventCallback] = None,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
        session: SessionArg = None,
    ) -> AsyncAcquisition[AsyncHold]:
        """A reentrant lock (``/locks/{name}``)."""
        return self._acquisition(
            SingleOp("lock", "/locks", name), AsyncHold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner, session
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
        session: SessionArg = None,
    ) -> AsyncAcquisition[AsyncHold]:
        """A fair lock (``/fair-locks/{name}``)."""
        return self._acquisition(
            SingleOp("fair-lock", "/fair-locks", name),
            AsyncHold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner, session,
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
        session: SessionArg = None,
    ) -> AsyncAcquisition[AsyncHold]:
        """The read side of a read-write lock (``/rwlocks/{name}``)."""
        op = SingleOp("read-lock", "/rwlocks", name, "/read/acquire", release_params={"mode": "read"})
        return self._acquisition(
            op, AsyncHold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner, session
        )

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
        session: SessionArg = None,
    ) -> AsyncAcquisition[AsyncHold]:
        """The write side of a read-write lock (``/rwlocks/{name}``)."""
        op = SingleOp("write-lock", "/rwlocks", name, "/write/acquire", release_params={"mode": "write"})
        return self._acquisition(
            op, AsyncHold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner, session
        )

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
        session: SessionArg = None,
    ) -> AsyncAcquisition[AsyncHold]:
        """``permits`` of a configured semaphore (``/semaphores/{name}``)."""
        op = SingleOp("semaphore", "/semaphores", name, extra={"permits": permits})
        return self._acquisition(
            op, AsyncHold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner, session
        )

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
        session: SessionArg = None,
    ) -> AsyncAcquisition[AsyncMultiHold]:
        """A set of locks, all or nothing."""
        return self._acquisition(
            MultiOp(names), AsyncMultiHold, holder, lease_ms, wait_ms, on_waiting, heartbeat_interval_ms, owner, session
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
        session: SessionArg = None,
    ) -> AsyncAcquisition[AsyncHold]:
        """A RedLock (``/redlocks/{name}``)."""
        return self._acquisition(
            SingleOp("redlock", "/redlocks", name), AsyncHold, holder, lease_ms, wait_ms, on_waiting,
            heartbeat_interval_ms, owner, session,
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
        session: SessionArg = None,
    ) -> AsyncAcquisition[AH]:
        # A hold in a session without a label of its own shows the
        # session's (the service lends it); elsewhere the client's.
        if owner is not None:
            op.owner = clean_owner(owner)
        elif session is None:
            op.owner = self._owner
        if session is not None:
            if lease_ms is not None:
                raise ValueError("a hold in a session lives as long as the session: pass lease_ms or session, not both")
            op.session = session if isinstance(session, str) else session.id
        return AsyncAcquisition(
            self,
            op,
            make,
            holder=holder,
            lease_ms=lease_ms,
            wait_ms=wait_ms,
            on_waiting=on_waiting,
            heartbeat_interval_ms=heartbeat_interval_ms,
            session=session,
        )

    def session(
        self,
        ttl_ms: Optional[int] = None,
        *,
        heartbeat_interval_ms: Optional[int] = None,
        owner: Optional[str] = None,
    ) -> AsyncAcquisition[AsyncSession]:
        """A session (``/sessions``): ``with client.session(ttl_ms=...) as
        session`` creates it, renews it in the background and deletes it
        at the end of the block (releasing every hold taken in it); pass
        ``session=session`` to any acquire to take the hold in it."""
        return self._acquisition(
            SessionOp(), AsyncSession, None, ttl_ms, 0, None, heartbeat_interval_ms, owner
        )

    # --- rate limiters ---------------------------------------------------------------

    def rate_limiter(self, name: str) -> "AsyncRateLimiter":
        return AsyncRateLimiter(self, name)

    async def acquire_limits(
        self,
        limits: Iterable[Union[Limit, Mapping[str, Any]]],
        *,
        wait_ms: int = 0,
        idempotency_key: Optional[str] = None,
        on_waiting: Optional[EventCallback] = None,
    ) -> List[LimitAcquired]:
        """Take permits from several limits at once, all or none
        (``POST /rate-limiters/acquire``): each a ``Limit(name, key,
        permits)`` (or ``rate_limiter(name).limit(key=...)``, or a dict of
        those members). Returns each limit's ``{"name", "key", "permits",
        "available"}`` in the order given. Raises ``RateLimited`` (with
        ``retry_after_ms``: when all of them admit, and ``limit``: one that
        refused) when they do not all admit within ``wait_ms``, and
        ``NotFound`` (``limit``) for a limiter never configured."""
        body = {"limits": [limit.to_json() if isinstance(limit, Limit) else dict(limit) for limit in limits]}
        result = await self._run(
            rate_acquire_flow(
                "/rate-limiters/acquire",
                body,
                wait_ms=int(wait_ms),
                limits=self._limits,
                idempotency_key=idempotency_key,
                on_waiting=on_waiting,
            )
        )
        acquired: List[LimitAcquired] = result["limits"]
        return acquired

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
                    await sleep(action.seconds)
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
        debug level. Another interrupt (or cancellation) cuts it short."""
        if call is None:
            return
        answer: Outcome
        try:
            answer = await bounded(self._perform(call), self._timeout)
        except Exception as error:  # noqa: BLE001 - best effort
            answer = NoAnswer(error)
        log.debug("latchkey: a wait that gave up left its queue: %s", leave_outcome(answer))

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
                return Answer(response.status_code, response.headers, json_body(response))
            headers["Accept"] = "text/event-stream"
            async with self._http.stream(
                call.method, call.path, params=call.params, headers=headers, timeout=timeout, **kwargs
            ) as response:
                content_type = response.headers.get("content-type", "")
                if response.status_code != 200 or not content_type.startswith("text/event-stream"):
                    await response.aread()
                    return Answer(response.status_code, response.headers, json_body(response))
                decoder = SseDecoder()
                async for line in response.aiter_lines():
                    event = decoder.feed(line)
                    if event is None:
                        continue
                    kind, data = event[0], json_text(event[1])
                    if kind in call.sse.final:
                        return SseFinal(kind, data)
                    await resolve(call.sse.on_event(kind, data))
                return NoAnswer(EOFError("the event stream ended without a final event"))
        except httpx.TransportError as error:
            return NoAnswer(error)
