"""Python client of latchkey: Redisson-style distributed locks and
synchronizers over HTTP.

>>> import latchkey
>>> with latchkey.Client() as lk:                     # $LATCHKEY_URL
...     with lk.lock("orders", lease_ms=30_000, wait_ms=10_000) as grant:
...         write_somewhere(fencing_token=grant.fencing_token)

Every hold-taking call (``lock``, ``fair_lock``, ``read_lock``,
``write_lock``, ``semaphore_permits``, ``multi_lock``, ``redlock``) returns
an acquisition: use it in ``with`` (``async with`` on ``AsyncClient``), or
call ``.acquire()`` and later ``.release()`` on the hold it returns. Holds
are renewed in the background; ``hold.lost`` is set and ``hold.check()``
raises ``HoldLost`` when one is lost.

``client.session(ttl_ms=...)`` is a session that many holds can be taken
in (``session=``), renewed by one heartbeat; ``client.rate_limiter(name)``
and ``client.acquire_limits([...])`` take permits from rate limiters.
"""

from ._async import (
    AsyncAcquisition,
    AsyncClient,
    AsyncHold,
    AsyncLatch,
    AsyncMultiHold,
    AsyncRateLimiter,
    AsyncSemaphore,
    AsyncSession,
)
from ._errors import (
    BackendUnavailable,
    Forbidden,
    HoldLost,
    InvalidRequest,
    LatchExists,
    LatchkeyError,
    NotAcquired,
    NotFound,
    NotHeld,
    OutOfRange,
    QuorumUnavailable,
    RateLimited,
    RedlockNotConfigured,
    SessionMismatch,
    ShuttingDown,
    TooManyWaiters,
    TransportError,
    Unauthorized,
    Unavailable,
    UpgradeWouldDeadlock,
)
from ._models import (
    Grant,
    HoldState,
    LatchState,
    Limit,
    LimitAcquired,
    LockHoldInfo,
    LockState,
    MultiGrant,
    NodeCount,
    RateAcquired,
    RateLimiterState,
    RedlockNodeState,
    RedlockState,
    RwLockState,
    SemaphoreState,
    SessionGrant,
    SessionState,
)
from . import _errors
from ._sync import Acquisition, Client, Hold, Latch, MultiHold, RateLimiter, Semaphore, Session

__version__ = "0.1.0"

__all__ = [
    "Client",
    "AsyncClient",
    "Acquisition",
    "AsyncAcquisition",
    "Hold",
    "MultiHold",
    "AsyncHold",
    "AsyncMultiHold",
    "Semaphore",
    "AsyncSemaphore",
    "Latch",
    "AsyncLatch",
    "Grant",
    "MultiGrant",
    "LockHoldInfo",
    "NodeCount",
    "LockState",
    "RwLockState",
    "HoldState",
    "RedlockState",
    "RedlockNodeState",
    "SemaphoreState",
    "LatchState",
    "Session",
    "AsyncSession",
    "SessionGrant",
    "SessionState",
    "RateLimiter",
    "AsyncRateLimiter",
    "RateLimiterState",
    "RateAcquired",
    "Limit",
    "LimitAcquired",
]
# Every error class, as the errors module lists them.
__all__ += _errors.__all__
