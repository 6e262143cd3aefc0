"""Exceptions: one per interesting problem type of the service.

Every error the service answers is an RFC 9457 problem document
(``{"type": "/problems/<slug>", "title", "status", "detail", ...}``); the
exception keeps it in ``.problem`` and its HTTP status in ``.status``.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Type

Problem = Dict[str, Any]

__all__ = [
    "LatchkeyError",
    "TransportError",
    "InvalidRequest",
    "OutOfRange",
    "NotFound",
    "NotHeld",
    "NotAcquired",
    "RateLimited",
    "SessionMismatch",
    "UpgradeWouldDeadlock",
    "LatchExists",
    "TooManyWaiters",
    "Unauthorized",
    "Forbidden",
    "Unavailable",
    "BackendUnavailable",
    "ShuttingDown",
    "QuorumUnavailable",
    "RedlockNotConfigured",
    "HoldLost",
]


class LatchkeyError(Exception):
    """Base class of every error this package raises.

    ``problem`` is the service's problem document (``None`` when the service
    did not answer), ``status`` the HTTP status (``None`` likewise).
    """

    def __init__(
        self,
        message: str,
        *,
        problem: Optional[Problem] = None,
        status: Optional[int] = None,
        retry_after_ms: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.problem: Optional[Problem] = problem
        self.status: Optional[int] = status
        if retry_after_ms is None and problem is not None:
            retry_after_ms = _int_or_none(problem.get("retry_after_ms"))
        self.retry_after_ms: Optional[int] = retry_after_ms

    @property
    def slug(self) -> Optional[str]:
        """The problem type's slug (``"lock-held"``, ...), if any."""
        return problem_slug(self.problem)

    @property
    def limit(self) -> Optional[Dict[str, Any]]:
        """Rate limiters, several limits at once: the limit the problem is
        about, ``{"name", "key"}`` (the one that refused, the one not
        configured, the one whose burst is smaller than its permits)."""
        value = (self.problem or {}).get("limit")
        return dict(value) if isinstance(value, dict) else None

    @property
    def detail(self) -> Optional[str]:
        if self.problem is None:
            return None
        detail = self.problem.get("detail")
        return detail if isinstance(detail, str) else None


class TransportError(LatchkeyError):
    """The request got no answer (connection refused or reset, timeout).

    The original ``httpx`` exception is the ``__cause__``.
    """


class InvalidRequest(LatchkeyError):
    """400/413/415: a bad name, body or value (``invalid-name``,
    ``invalid-body``, ``out-of-range``, ...)."""


class OutOfRange(InvalidRequest):
    """400 ``out-of-range``; ``field`` names the member, and ``minimum`` /
    ``maximum`` give the accepted range when the service states it."""

    @property
    def field(self) -> Optional[str]:
        value = (self.problem or {}).get("field")
        return value if isinstance(value, str) else None

    @property
    def minimum(self) -> Optional[int]:
        return _int_or_none((self.problem or {}).get("minimum"))

    @property
    def maximum(self) -> Optional[int]:
        return _int_or_none((self.problem or {}).get("maximum"))


class NotFound(LatchkeyError):
    """404 ``not-found``: no such semaphore or latch (or route)."""


class NotHeld(LatchkeyError):
    """404 ``not-held``: the holder holds nothing there (any more)."""

    @property
    def not_held(self) -> Optional[List[str]]:
        """Multi-locks: the names the holder does not hold."""
        value = (self.problem or {}).get("not_held")
        return list(value) if isinstance(value, list) else None


class NotAcquired(LatchkeyError):
    """The hold was not granted within the wait (409 ``lock-held`` /
    ``no-permits``, or an SSE ``timeout``).

    ``retry_after_ms`` is the service's hint of when to try again;
    ``position`` (fair queues), ``available`` (semaphores) and
    ``blocked_by`` (multi-locks) are copied from the problem when present.
    """

    @property
    def position(self) -> Optional[int]:
        return _int_or_none((self.problem or {}).get("position"))

    @property
    def available(self) -> Optional[int]:
        return _int_or_none((self.problem or {}).get("available"))

    @property
    def blocked_by(self) -> Optional[List[str]]:
        value = (self.problem or {}).get("blocked_by")
        return list(value) if isinstance(value, list) else None


class RateLimited(NotAcquired):
    """429 ``rate-limited``: a rate limiter did not admit the acquire within
    its wait. ``retry_after_ms`` is exactly when the permits will be
    available (for several limits: when all of them admit), ``available``
    what could be taken now, and ``limit`` (several limits) the
    ``{"name", "key"}`` of one that refused."""


class SessionMismatch(LatchkeyError):
    """409 ``session-mismatch``: the holder already holds the object outside
    this session (or in another one, or in one when acquiring without);
    nothing changed."""


class UpgradeWouldDeadlock(LatchkeyError):
    """409 ``upgrade-would-deadlock``: a reader asked to write while other
    readers hold the rwlock. Release the read hold first."""


class LatchExists(LatchkeyError):
    """409 ``latch-exists``: the latch is closed (count > 0)."""


class TooManyWaiters(LatchkeyError):
    """429 ``too-many-waiters``: the instance's waiter limit is reached."""


class Unauthorized(LatchkeyError):
    """401 ``unauthorized``."""


class Forbidden(LatchkeyError):
    """403 ``forbidden``."""


class Unavailable(LatchkeyError):
    """503: the service cannot do the work right now; retry later."""


class BackendUnavailable(Unavailable):
    """503 ``backend-unavailable``: Redis is unreachable, slow or refusing."""


class ShuttingDown(Unavailable):
    """503 ``shutting-down``: the instance is stopping; retry elsewhere."""


class QuorumUnavailable(Unavailable):
    """503 ``quorum-unavailable``: too few RedLock nodes answered."""


class RedlockNotConfigured(LatchkeyError):
    """503 ``redlock-not-configured``: the service has no RedLock nodes."""


class HoldLost(LatchkeyError):
    """The hold (or session) is gone: a heartbeat was answered 404
    ``not-held``, or no heartbeat succeeded before the lease ended by the
    client's own clock, or the release found nothing held, or (a hold
    taken in a session) its session was lost.

    Whatever the hold protected may already be in other hands. ``reason``
    says which of the above happened: ``"not-held"`` (the service said so,
    to a heartbeat or to the release), ``"expired"`` (the client's clock),
    ``"renewer-failed"`` (the renewing thread or task crashed) or
    ``"session-lost"`` (a hold taken in a session whose session was lost).
    """

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        problem: Optional[Problem] = None,
        status: Optional[int] = None,
    ) -> None:
        super().__init__(message, problem=problem, status=status)
        self.reason: str = reason


_BY_SLUG: Mapping[str, Type[LatchkeyError]] = {
    "invalid-name": InvalidRequest,
    "invalid-body": InvalidRequest,
    "out-of-range": OutOfRange,
    "unsupported-media-type": InvalidRequest,
    "body-too-large": InvalidRequest,
    "method-not-allowed": InvalidRequest,
    "not-found": NotFound,
    "not-held": NotHeld,
    "lock-held": NotAcquired,
    "no-permits": NotAcquired,
    "rate-limited": RateLimited,
    "session-mismatch": SessionMismatch,
    "upgrade-would-deadlock": UpgradeWouldDeadlock,
    "latch-exists": LatchExists,
    "too-many-waiters": TooManyWaiters,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "backend-unavailable": BackendUnavailable,
    "shutting-down": ShuttingDown,
    "quorum-unavailable": QuorumUnavailable,
    "redlock-not-configured": RedlockNotConfigured,
}

# Answers after which trying again later may succeed: the acquire and wait
# loops retry these within the caller's total wait.
RETRYABLE_SLUGS = frozenset(
    {"too-many-waiters", "backend-unavailable", "shutting-down", "quorum-unavailable"}
)


def problem_slug(problem: Optional[Mapping[str, Any]]) -> Optional[str]:
    if not problem:
        return None
    kind = problem.get("type")
    if not isinstance(kind, str):
        return None
    return kind.rsplit("/", 1)[-1]


def error_from_problem(
    status: int,
    problem: Optional[Problem],
    retry_after_header: Optional[str] = None,
) -> LatchkeyError:
    """The exception for an error answer (status + problem document)."""
    slug = problem_slug(problem)
    cls: Type[LatchkeyError]
    if slug is not None and slug in _BY_SLUG:
        cls = _BY_SLUG[slug]
    elif status == 503:
        cls = Unavailable
    elif status == 404:
        cls = NotFound
    elif 400 <= status < 500:
        cls = InvalidRequest
    else:
        cls = LatchkeyError
    title = (problem or {}).get("title") or f"HTTP {status}"
    detail = (problem or {}).get("detail")
    message = f"{status} {slug or ''}: {title}".replace(" :", ":")
    if detail:
        message += f" ({detail})"
    retry_after_ms = _int_or_none((problem or {}).get("retry_after_ms"))
    if retry_after_ms is None:
        retry_after_ms = retry_after_header_ms(retry_after_header)
    return cls(message, problem=problem, status=status, retry_after_ms=retry_after_ms)


def retry_after_header_ms(value: Optional[str]) -> Optional[int]:
    """``Retry-After`` (whole seconds) in milliseconds; ``None`` if absent
    or not a number (an HTTP date is not worth honouring here)."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return int(seconds * 1000)


def _int_or_none(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    return None
