"""The protocol, without I/O.

The waiting loops (acquire, latch wait, count-down) are written once, as
generators that yield what to do next (an HTTP call or a sleep) and receive
what came of it. The sync client and the asyncio client each drive them with
their own I/O, so both behave the same way.
"""

from __future__ import annotations

import json
import math
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Dict,
    FrozenSet,
    Generator,
    Generic,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)
from urllib.parse import quote

from ._errors import (
    RETRYABLE_SLUGS,
    LatchkeyError,
    NotAcquired,
    Problem,
    RateLimited,
    TransportError,
    error_from_problem,
    problem_slug,
)
from ._models import Grant, LatchState, MultiGrant, SessionGrant

G = TypeVar("G", Grant, MultiGrant, SessionGrant)
T = TypeVar("T")

# What the service answers for wait_ms when it does not say its maximum.
DEFAULT_MAX_WAIT_MS = 60_000
# Answered without a hint: wait this long before trying again.
DEFAULT_RETRY_MS = 500
# Never try again sooner than this after a 429/503.
MIN_RETRY_MS = 50


class _NoBody:
    def __repr__(self) -> str:
        return "NO_BODY"


NO_BODY: Any = _NoBody()


def now() -> float:
    return time.monotonic()


def new_holder_id() -> str:
    """128 random bits, like the ids the service generates."""
    return secrets.token_hex(16)


def seg(value: str) -> str:
    """One URL path segment."""
    return quote(value, safe="")


# --- what a flow asks its driver to do, and what it gets back ---------------


@dataclass
class SseSpec:
    """Read the answer as Server-Sent Events: ``on_event(event, data)`` for
    every event that is not one of ``final``; the first final event ends
    the call."""

    final: FrozenSet[str]
    on_event: Callable[[str, Any], Any]


@dataclass
class HttpCall:
    method: str
    path: str
    json: Any = NO_BODY
    params: Optional[Dict[str, str]] = None
    headers: Dict[str, str] = field(default_factory=dict)
    # How long the service may hold the request open on purpose (added to
    # the read timeout).
    server_wait_ms: int = 0
    # A cap on the whole call, in seconds (heartbeats: the lease's time left).
    deadline_s: Optional[float] = None
    sse: Optional[SseSpec] = None


@dataclass
class Sleep:
    seconds: float


@dataclass
class Answer:
    status: int
    headers: Mapping[str, str]
    data: Any


@dataclass
class SseFinal:
    event: str
    data: Any


@dataclass
class NoAnswer:
    error: Exception


Outcome = Union[Answer, SseFinal, NoAnswer, None]
Flow = Generator[Union[HttpCall, Sleep], Outcome, T]


def json_body(response: Any) -> Any:
    """An ``httpx`` response's JSON body, ``None`` when empty or not JSON."""
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def json_text(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def leave_outcome(answer: Outcome) -> str:
    """What came of a leave, for the log (never the holder id)."""
    if isinstance(answer, Answer):
        return f"answered {answer.status}"
    if isinstance(answer, NoAnswer):
        return f"no answer ({answer.error!r})"
    return repr(answer)


class ServerLimits:
    """What the client learned about the service (shared by its calls)."""

    def __init__(self) -> None:
        self.max_wait_ms: Optional[int] = None


# --- SSE ---------------------------------------------------------------------


class SseDecoder:
    """Turns lines of a ``text/event-stream`` into (event, data) pairs."""

    def __init__(self) -> None:
        self._event = ""
        self._data: List[str] = []

    def feed(self, line: str) -> Optional[Tuple[str, str]]:
        line = line.rstrip("\r\n")
        if line == "":
            if not self._data and not self._event:
                return None
            out = (self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return out
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


# --- answers to exceptions -------------------------------------------------------


def problem_of(answer: Union[Answer, SseFinal]) -> Tuple[int, Optional[Problem], Optional[str]]:
    """(status, problem document, Retry-After header) of an error answer."""
    if isinstance(answer, SseFinal):
        data = answer.data if isinstance(answer.data, dict) else None
        status = data.get("status") if data else None
        if not isinstance(status, int):
            status = 409 if answer.event == "timeout" else 500
        return status, data, None
    data = answer.data if isinstance(answer.data, dict) else None
    return answer.status, data, answer.headers.get("retry-after")


def raise_for(answer: Outcome, ok: Sequence[int] = (200,)) -> Any:
    """The JSON body of a successful answer, or the matching exception."""
    if isinstance(answer, NoAnswer):
        raise TransportError(
            f"no answer from latchkey: {answer.error!r}"
        ) from answer.error
    if isinstance(answer, Answer) and answer.status in ok:
        return answer.data
    if answer is None:  # pragma: no cover - drivers always answer calls
        raise LatchkeyError("no answer")
    status, problem, retry_after = problem_of(answer)
    raise error_from_problem(status, problem, retry_after)


def single(call: HttpCall, ok: Sequence[int] = (200,)) -> Flow[Any]:
    """One call, no retries."""
    answer = yield call
    return raise_for(answer, ok)


# --- hold-taking operations ----------------------------------------------------


# The kinds whose waiters keep a queue place after their request ended
# (for the service's queue grace), which a wait that gives up leaves.
QUEUED_KINDS = frozenset({"fair-lock", "read-lock", "write-lock", "semaphore"})


class HoldOp(Generic[G]):
    """How to acquire, renew and release one kind of hold."""

    kind: str
    # What is lost when it is lost ("hold lost", "session lost").
    noun = "hold"
    # The owner label every acquire of this op sends (None: none).
    owner: Optional[str] = None
    # The session every acquire of this op is taken in (None: none; the
    # hold then has a lease of its own).
    session: Optional[str] = None

    def _hold_body(self, body: Dict[str, Any], holder: Optional[str], lease_ms: Optional[int]) -> Dict[str, Any]:
        """``body`` with what every hold-taking acquire sends."""
        if holder is not None:
            body["holder"] = holder
        if self.owner is not None:
            body["owner"] = self.owner
        if self.session is not None:
            body["session"] = self.session
        if lease_ms is not None:
            body["lease_ms"] = lease_ms
        return body

    def acquire_call(self, holder: Optional[str], lease_ms: Optional[int], wait_ms: int) -> HttpCall:
        raise NotImplementedError

    def heartbeat_call(self, holder: str, lease_ms: Optional[int]) -> HttpCall:
        raise NotImplementedError

    def release_call(self, holder: str) -> HttpCall:
        raise NotImplementedError

    def parse(self, data: Mapping[str, Any]) -> G:
        raise NotImplementedError

    def label(self) -> str:
        raise NotImplementedError


class SingleOp(HoldOp[Grant]):
    """Locks, fair locks, rwlocks, semaphores, RedLock: one named object."""

    def __init__(
        self,
        kind: str,
        prefix: str,
        name: str,
        acquire_suffix: str = "/acquire",
        extra: Optional[Dict[str, Any]] = None,
        release_params: Optional[Dict[str, str]] = None,
    ) -> None:
        self.kind = kind
        self.name = name
        self.base = f"{prefix}/{seg(name)}"
        self.acquire_suffix = acquire_suffix
        self.extra = extra or {}
        self.release_params = release_params

    def acquire_call(self, holder: Optional[str], lease_ms: Optional[int], wait_ms: int) -> HttpCall:
        body = self._hold_body(dict(self.extra), holder, lease_ms)
        body["wait_ms"] = wait_ms
        return HttpCall("POST", self.base + self.acquire_suffix, json=body, server_wait_ms=wait_ms)

    def heartbeat_call(self, holder: str, lease_ms: Optional[int]) -> HttpCall:
        body: Dict[str, Any] = {} if lease_ms is None else {"lease_ms": lease_ms}
        return HttpCall("POST", f"{self.base}/holders/{seg(holder)}/heartbeat", json=body)

    def release_call(self, holder: str) -> HttpCall:
        return HttpCall(
            "DELETE", f"{self.base}/holders/{seg(holder)}", params=self.release_params
        )

    def parse(self, data: Mapping[str, Any]) -> Grant:
        return Grant.from_json(data)

    def label(self) -> str:
        return f"{self.kind} {self.name!r}"


class MultiOp(HoldOp[MultiGrant]):
    kind = "multi-lock"

    def __init__(self, names: Sequence[str]) -> None:
        if isinstance(names, str):
            raise TypeError("multi_lock takes a list of names, not one string")
        self.names = list(names)

    def acquire_call(self, holder: Optional[str], lease_ms: Optional[int], wait_ms: int) -> HttpCall:
        body = self._hold_body({"names": self.names, "wait_ms": wait_ms}, holder, lease_ms)
        return HttpCall("POST", "/multilocks/acquire", json=body, server_wait_ms=wait_ms)

    def heartbeat_call(self, holder: str, lease_ms: Optional[int]) -> HttpCall:
        body: Dict[str, Any] = {"names": self.names, "holder": holder}
        if lease_ms is not None:
            body["lease_ms"] = lease_ms
        return HttpCall("POST", "/multilocks/heartbeat", json=body)

    def release_call(self, holder: str) -> HttpCall:
        return HttpCall("POST", "/multilocks/release", json={"names": self.names, "holder": holder})

    def parse(self, data: Mapping[str, Any]) -> MultiGrant:
        return MultiGrant.from_json(data)

    def label(self) -> str:
        return f"multi-lock {self.names!r}"


class SessionOp(HoldOp[SessionGrant]):
    """A session, renewed and released like a hold: its id plays the
    holder, its TTL the lease (``/sessions``)."""

    kind = "session"
    noun = "session"

    def acquire_call(self, holder: Optional[str], lease_ms: Optional[int], wait_ms: int) -> HttpCall:
        body: Dict[str, Any] = {}
        if lease_ms is not None:
            body["ttl_ms"] = lease_ms
        if self.owner is not None:
            body["owner"] = self.owner
        return HttpCall("POST", "/sessions", json=body)

    def heartbeat_call(self, holder: str, lease_ms: Optional[int]) -> HttpCall:
        body: Dict[str, Any] = {} if lease_ms is None else {"ttl_ms": lease_ms}
        return HttpCall("POST", f"/sessions/{seg(holder)}/heartbeat", json=body)

    def release_call(self, holder: str) -> HttpCall:
        return HttpCall("DELETE", f"/sessions/{seg(holder)}")

    def parse(self, data: Mapping[str, Any]) -> SessionGrant:
        return SessionGrant.from_json(data)

    def label(self) -> str:
        return "session"


# --- waiting ---------------------------------------------------------------------


def wait_holder(holder: Optional[str], wait_ms: int) -> Optional[str]:
    """The holder id of an acquire: the caller's, else for a wait one the
    client makes up (128 random bits, as the service does), so that every
    poll of the wait is the same waiter and the wait can leave its queue
    when it gives up (a 409 does not tell the id the service chose). A
    try (``wait_ms`` 0) without one lets the service choose."""
    if holder is None and wait_ms > 0:
        return new_holder_id()
    return holder


def leave_call(op: HoldOp[Any], holder: Optional[str], wait_ms: int) -> Optional[HttpCall]:
    """The call by which a wait that gave up (ran out, raised, was
    cancelled) leaves its queue: the holder's release, which the service
    answers 200 ``left_queue`` for a waiter (and 404 when nothing is
    left), and which also releases a grant whose answer never arrived.
    ``None`` when there is nothing to leave: a try takes no place, and only
    fair locks, rwlocks and semaphores keep a queue."""
    if holder is None or wait_ms <= 0 or op.kind not in QUEUED_KINDS:
        return None
    return op.release_call(holder)


def _poll_ms(deadline: float, limits: ServerLimits) -> int:
    """This poll's wait in ms: what is left of the whole wait, at most the
    service's longest long-poll."""
    left = max(0, math.ceil((deadline - now()) * 1000))
    cap = limits.max_wait_ms
    return left if cap is None else min(left, cap)


def _learn_max_wait(problem: Optional[Problem], asked_ms: int, limits: ServerLimits, fallback_used: bool) -> Optional[bool]:
    """After a 400 out-of-range on ``wait_ms``: learn the service's longest
    long-poll. Returns whether the fallback was used now (``None``: nothing
    learned; the caller raises)."""
    if not problem or problem.get("field") != "wait_ms":
        return None
    maximum = problem.get("maximum")
    if isinstance(maximum, int) and not isinstance(maximum, bool) and 0 <= maximum < asked_ms:
        limits.max_wait_ms = maximum
        return fallback_used
    if maximum is None and not fallback_used and asked_ms > DEFAULT_MAX_WAIT_MS:
        limits.max_wait_ms = DEFAULT_MAX_WAIT_MS
        return True
    return None


class _Recovery:
    """What the waiting flows do after an error answer that is not a
    refusal: learn the service's longest long-poll from a 400
    ``out-of-range`` on ``wait_ms`` (and poll again in pieces that fit),
    sleep through a retryable one (429 ``too-many-waiters``, 503) within the
    whole wait; raise anything else."""

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self.fallback_used = False

    def handle(self, error: LatchkeyError, poll: int, deadline: float) -> Flow[None]:
        slug = error.slug
        if slug == "out-of-range":
            learned = _learn_max_wait(error.problem, poll, self.limits, self.fallback_used)
            if learned is None:
                raise error
            self.fallback_used = learned
            return
        if slug in RETRYABLE_SLUGS:
            if now() >= deadline:
                raise error
            hint = error.retry_after_ms if error.retry_after_ms is not None else DEFAULT_RETRY_MS
            yield Sleep(min(max(hint, MIN_RETRY_MS) / 1000, max(0.0, deadline - now())))
            if now() >= deadline:
                raise error
            return
        raise error


def waiting_sse(on_waiting: Optional[Callable[[Dict[str, Any]], Any]]) -> Optional[SseSpec]:
    """Stream an acquire's events, calling ``on_waiting`` with each
    ``waiting`` event's data (``None``: plain long-poll)."""
    if on_waiting is None:
        return None
    callback = on_waiting
    return SseSpec(
        final=frozenset({"acquired", "timeout", "error"}),
        on_event=lambda event, data: callback(data) if event == "waiting" else None,
    )


def acquire_flow(
    op: HoldOp[G],
    *,
    holder: Optional[str],
    lease_ms: Optional[int],
    wait_ms: int,
    limits: ServerLimits,
    on_waiting: Optional[Callable[[Dict[str, Any]], Any]] = None,
) -> Flow[Tuple[G, float, float]]:
    """Acquire within ``wait_ms`` in total: long-polls of at most the
    service's ``max_wait_ms`` under one holder id (which keeps a queue
    place between them; see ``wait_holder``), retrying 429/503 answers
    within the wait. The caller leaves the queue when it gives up (see
    ``leave_call``).

    Returns the grant, when its request was sent and when its answer came
    (``now()``)."""
    if wait_ms < 0:
        raise ValueError("wait_ms must be >= 0")
    deadline = now() + wait_ms / 1000
    recovery = _Recovery(limits)
    sse = waiting_sse(on_waiting)
    holder = wait_holder(holder, wait_ms)
    while True:
        poll = _poll_ms(deadline, limits)
        call = op.acquire_call(holder, lease_ms, poll)
        call.sse = sse
        sent = now()
        answer = yield call
        if isinstance(answer, NoAnswer):
            # Not retried: the lost answer may have been a grant, and a
            # second try as the same holder would re-enter the lock.
            raise_for(answer)
        if isinstance(answer, SseFinal) and answer.event == "acquired":
            return op.parse(answer.data), sent, now()
        if isinstance(answer, Answer) and answer.status in (200, 201):
            return op.parse(answer.data), sent, now()
        assert isinstance(answer, (Answer, SseFinal))
        status, problem, retry_after = problem_of(answer)
        error = error_from_problem(status, problem, retry_after)
        if isinstance(error, NotAcquired):
            if now() >= deadline:
                raise error
            if (now() - sent) * 1000 < poll - 100:
                # Answered before this poll's wait was over (it should
                # not be): don't spin; the hint keeps a queue place.
                hint = error.retry_after_ms if error.retry_after_ms is not None else 100
                yield Sleep(min(max(hint, 10) / 1000, 1.0, max(0.0, deadline - now())))
            continue
        yield from recovery.handle(error, poll, deadline)


def latch_wait_flow(
    name: str,
    *,
    wait_ms: int,
    limits: ServerLimits,
    on_count: Optional[Callable[[Dict[str, Any]], Any]] = None,
) -> Flow[LatchState]:
    """Wait up to ``wait_ms`` in total for a latch to open; the latch's
    state at the end (``open`` false if the wait ran out)."""
    if wait_ms < 0:
        raise ValueError("wait_ms must be >= 0")
    deadline = now() + wait_ms / 1000
    recovery = _Recovery(limits)
    sse = None
    if on_count is not None:
        callback = on_count
        sse = SseSpec(
            final=frozenset({"open", "timeout", "error"}),
            on_event=lambda event, data: callback(data) if event == "count" else None,
        )
    path = f"/latches/{seg(name)}/wait"
    while True:
        poll = _poll_ms(deadline, limits)
        call = HttpCall("GET", path, params={"wait_ms": str(poll)}, server_wait_ms=poll, sse=sse)
        sent = now()
        answer = yield call
        if isinstance(answer, NoAnswer):
            raise_for(answer)
        state: Optional[LatchState] = None
        if isinstance(answer, SseFinal) and answer.event in ("open", "timeout"):
            state = answer.data
        elif isinstance(answer, Answer) and answer.status == 200:
            state = answer.data
        if state is not None:
            if state.get("open") or now() >= deadline:
                return state
            if (now() - sent) * 1000 < poll - 100:
                # Closed, but answered before this poll's wait was over
                # (it should not be): don't spin.
                yield Sleep(min(0.1, max(0.0, deadline - now())))
            continue
        assert isinstance(answer, (Answer, SseFinal))
        status, problem, retry_after = problem_of(answer)
        yield from recovery.handle(error_from_problem(status, problem, retry_after), poll, deadline)


def rate_acquire_flow(
    path: str,
    body: Dict[str, Any],
    *,
    wait_ms: int,
    limits: ServerLimits,
    idempotency_key: Optional[str] = None,
    on_waiting: Optional[Callable[[Dict[str, Any]], Any]] = None,
) -> Flow[Any]:
    """A rate-limiter acquire (one limiter, or several limits at once) that
    may wait up to ``wait_ms``: the service answers at once when the
    permits come later than the wait (429 ``rate-limited``, nothing
    reserved), else reserves them and answers when they are due. A wait
    longer than the service's longest long-poll sleeps until the permits
    are due within one. With ``idempotency_key`` a request that got no
    answer is repeated once with the key (it counts once); without one it
    is not (it may have been admitted). Returns the 200 body."""
    if wait_ms < 0:
        raise ValueError("wait_ms must be >= 0")
    deadline = now() + wait_ms / 1000
    recovery = _Recovery(limits)
    sse = waiting_sse(on_waiting)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    repeated = False
    while True:
        poll = _poll_ms(deadline, limits)
        call = HttpCall(
            "POST", path, json={**body, "wait_ms": poll}, headers=dict(headers), server_wait_ms=poll, sse=sse
        )
        answer = yield call
        if isinstance(answer, NoAnswer):
            if idempotency_key and not repeated:
                repeated = True
                continue
            raise_for(answer)
        if isinstance(answer, SseFinal) and answer.event == "acquired":
            return answer.data
        if isinstance(answer, Answer) and answer.status == 200:
            return answer.data
        assert isinstance(answer, (Answer, SseFinal))
        status, problem, retry_after = problem_of(answer)
        error = error_from_problem(status, problem, retry_after)
        if isinstance(error, RateLimited):
            due_ms = error.retry_after_ms
            left_ms = (deadline - now()) * 1000
            if due_ms is None or due_ms > left_ms or due_ms <= poll:
                raise error
            # This poll was cut to the longest long-poll and the permits
            # come within the whole wait: ask again when they are due
            # within one poll.
            yield Sleep((due_ms - poll) / 1000)
            continue
        yield from recovery.handle(error, poll, deadline)


def count_down_flow(name: str, by: int, idempotency_key: Optional[str]) -> Flow[LatchState]:
    """Count a latch down under an ``Idempotency-Key`` (a new uuid4 when
    none is given), so that repeating it counts once: it is repeated once,
    with the same key, when no answer came or the service was briefly
    unavailable."""
    key = idempotency_key or str(uuid.uuid4())
    call = HttpCall(
        "POST",
        f"/latches/{seg(name)}/count-down",
        json={"by": by},
        headers={"Idempotency-Key": key},
    )
    answer = yield call
    retry = isinstance(answer, NoAnswer)
    if isinstance(answer, Answer) and answer.status == 503:
        slug = problem_slug(answer.data if isinstance(answer.data, dict) else None)
        retry = slug in ("backend-unavailable", "shutting-down")
    if retry:
        answer = yield call
    result: LatchState = raise_for(answer)
    return result


# --- heartbeats --------------------------------------------------------------------


class LeaseClock:
    """When to renew and when the lease ends, by the client's own monotonic
    clock. The lease counts from when the last successful acquire or
    heartbeat request was *sent* (the service's lease started no earlier),
    except after an acquire that waited (see ``__init__``)."""

    def __init__(
        self,
        grant: Union[Grant, MultiGrant, SessionGrant],
        sent_at: float,
        interval_ms: Optional[int],
        received_at: Optional[float] = None,
    ) -> None:
        self._interval_override = interval_ms
        self.interval_s = 0.0
        self.deadline = 0.0
        self.next_beat = 0.0
        self.renewed(grant, sent_at)
        if received_at is not None and received_at - sent_at > self.interval_s:
            # The acquire waited: its lease began when it was granted, at
            # the end of the wait, not when the request was sent (counting
            # from then would end a lease shorter than the wait at once).
            # The answer leaves as soon as the grant is made, so count from
            # one heartbeat interval before it arrived (it takes less than
            # that to arrive), and renew at once, which counts from a
            # request's sending again.
            lease = min(grant.lease_ms, grant.expires_in_ms)
            self.deadline = received_at - self.interval_s + lease / 1000
            self.next_beat = received_at

    def renewed(self, grant: Union[Grant, MultiGrant, SessionGrant], sent_at: float) -> None:
        lease = min(grant.lease_ms, grant.expires_in_ms)
        interval = self._interval_override or grant.heartbeat_interval_ms or lease // 3
        self.interval_s = max(interval, 1) / 1000
        self.deadline = sent_at + lease / 1000
        self.next_beat = sent_at + self.interval_s

    def failed(self, retry_after_ms: Optional[int]) -> None:
        """A heartbeat got no useful answer: try again sooner."""
        t = now()
        left = self.deadline - t
        delay = self.interval_s / 3
        if retry_after_ms is not None and retry_after_ms / 1000 < left:
            delay = retry_after_ms / 1000
        self.next_beat = t + max(0.005, min(delay, left))

    def left(self) -> float:
        return self.deadline - now()


class Beat:
    """What came of one heartbeat."""

    OK = "ok"
    LOST = "lost"
    RETRY = "retry"


def judge_heartbeat(
    op: HoldOp[G], answer: Outcome
) -> Tuple[str, Optional[G], Optional[LatchkeyError]]:
    """(Beat.*, the renewed grant, the error)."""
    if isinstance(answer, Answer) and answer.status == 200:
        return Beat.OK, op.parse(answer.data), None
    if isinstance(answer, NoAnswer) or answer is None:
        error: LatchkeyError = TransportError(f"heartbeat got no answer: {answer!r}")
        return Beat.RETRY, None, error
    status, problem, retry_after = problem_of(answer)
    error = error_from_problem(status, problem, retry_after)
    if status == 404:
        # not-held (released, expired, force-unlocked), or the object is
        # gone (a deleted semaphore): nothing left to renew.
        return Beat.LOST, None, error
    # 503/429, and anything unexpected: the lease may still stand, so keep
    # trying until it ends.
    return Beat.RETRY, None, error
