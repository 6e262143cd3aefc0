"""The service's answers as typed values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, TypedDict

__all__ = [
    "Grant",
    "MultiGrant",
    "LockHoldInfo",
    "NodeCount",
    "LockState",
    "RwLockState",
    "HoldState",
    "RedlockNodeState",
    "RedlockState",
    "SemaphoreState",
    "LatchState",
    "SessionGrant",
    "SessionState",
    "RateLimiterState",
    "RateAcquired",
    "LimitAcquired",
    "Limit",
    "short_holder",
]


def short_holder(holder: Optional[str]) -> str:
    """A holder id cut short for ``repr`` and logs: it is a capability."""
    if not holder:
        return "?"
    return holder[:4] + "…" if len(holder) > 6 else "…"


@dataclass(frozen=True)
class NodeCount:
    """RedLock: on how many nodes the hold stands, of how many."""

    acquired: int
    total: int


@dataclass(frozen=True, repr=False)
class Grant:
    """A single-object grant (201 to an acquire, 200 to a heartbeat).

    ``mode``/``read_hold_count``/``write_hold_count`` are set on rwlocks,
    ``permits`` on semaphores, ``validity_ms``/``nodes`` on RedLock.
    ``raw`` is the JSON body as received.
    """

    name: str
    holder: str
    fencing_token: int
    hold_count: int
    lease_ms: int
    expires_in_ms: int
    heartbeat_interval_ms: int
    mode: Optional[str] = None
    read_hold_count: Optional[int] = None
    write_hold_count: Optional[int] = None
    permits: Optional[int] = None
    validity_ms: Optional[int] = None
    nodes: Optional[NodeCount] = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Grant":
        nodes = data.get("nodes")
        return cls(
            name=str(data["name"]),
            holder=str(data["holder"]),
            fencing_token=int(data["fencing_token"]),
            hold_count=int(data.get("hold_count", 1)),
            lease_ms=int(data["lease_ms"]),
            expires_in_ms=int(data.get("expires_in_ms", data["lease_ms"])),
            heartbeat_interval_ms=int(
                data.get("heartbeat_interval_ms", int(data["lease_ms"]) // 3)
            ),
            mode=data.get("mode"),
            read_hold_count=data.get("read_hold_count"),
            write_hold_count=data.get("write_hold_count"),
            permits=data.get("permits"),
            validity_ms=data.get("validity_ms"),
            nodes=(
                NodeCount(int(nodes["acquired"]), int(nodes["total"]))
                if isinstance(nodes, Mapping)
                else None
            ),
            raw=dict(data),
        )

    def __repr__(self) -> str:
        extra = ""
        if self.mode is not None:
            extra += f", mode={self.mode!r}"
        if self.permits is not None:
            extra += f", permits={self.permits}"
        if self.validity_ms is not None:
            extra += f", validity_ms={self.validity_ms}"
        return (
            f"Grant(name={self.name!r}, holder={short_holder(self.holder)!r}, "
            f"fencing_token={self.fencing_token}, hold_count={self.hold_count}, "
            f"lease_ms={self.lease_ms}{extra})"
        )


@dataclass(frozen=True)
class LockHoldInfo:
    """One lock of a multi-lock grant."""

    name: str
    fencing_token: int
    hold_count: int


@dataclass(frozen=True, repr=False)
class MultiGrant:
    """A multi-lock grant: every lock of the set, under one holder and lease."""

    holder: str
    locks: List[LockHoldInfo]
    lease_ms: int
    expires_in_ms: int
    heartbeat_interval_ms: int
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "MultiGrant":
        return cls(
            holder=str(data["holder"]),
            locks=[
                LockHoldInfo(
                    name=str(lock["name"]),
                    fencing_token=int(lock["fencing_token"]),
                    hold_count=int(lock.get("hold_count", 1)),
                )
                for lock in data["locks"]
            ],
            lease_ms=int(data["lease_ms"]),
            expires_in_ms=int(data.get("expires_in_ms", data["lease_ms"])),
            heartbeat_interval_ms=int(
                data.get("heartbeat_interval_ms", int(data["lease_ms"]) // 3)
            ),
            raw=dict(data),
        )

    @property
    def names(self) -> List[str]:
        return [lock.name for lock in self.locks]

    @property
    def fencing_tokens(self) -> Dict[str, int]:
        """Each lock's fencing token by name (pass each resource its own)."""
        return {lock.name: lock.fencing_token for lock in self.locks}

    def __repr__(self) -> str:
        return (
            f"MultiGrant(holder={short_holder(self.holder)!r}, "
            f"fencing_tokens={self.fencing_tokens!r}, lease_ms={self.lease_ms})"
        )


class LockState(TypedDict):
    """``GET /locks/{name}`` and ``GET /fair-locks/{name}``."""

    name: str
    locked: bool
    hold_count: int
    ttl_ms: int
    fencing_token: int
    waiters: int


class HoldState(TypedDict, total=False):
    """One hold in a state read: ``owner`` (its label, or ``None``),
    ``expires_in_ms``, ``held_for_ms``, ``session`` (taken in one), and
    ``hold_count`` + ``mode`` (rwlocks) or ``permits`` (semaphores). Never
    a holder id."""

    owner: Optional[str]
    expires_in_ms: int
    held_for_ms: int
    session: bool
    hold_count: int
    mode: str
    permits: int


class RwLockState(TypedDict):
    """``GET /rwlocks/{name}``; ``mode`` is ``"read"``, ``"write"`` or ``None``;
    ``queued`` counts the waiters of every instance."""

    name: str
    mode: Optional[str]
    readers: int
    writer_hold_count: int
    ttl_ms: int
    fencing_token: int
    waiters: int
    queued: int
    holds: List[HoldState]


class RedlockNodeState(TypedDict):
    node: int
    reachable: bool
    locked: bool
    ttl_ms: int


class RedlockState(TypedDict):
    """``GET /redlocks/{name}``."""

    name: str
    locked_on: int
    total: int
    nodes: List[RedlockNodeState]


class SemaphoreState(TypedDict):
    """``GET``/``PUT /semaphores/{name}``."""

    name: str
    permits: int
    available: int
    holders: int
    waiters: int
    queued: int
    holds: List[HoldState]


class LatchState(TypedDict, total=False):
    """A latch's state: ``{"count", "open"}`` (+ ``name`` on reads)."""

    name: str
    count: int
    open: bool


@dataclass(frozen=True, repr=False)
class SessionGrant:
    """A session's answer to its creation (201) or a heartbeat (200):
    its id (a capability, like a holder id), ``ttl_ms``,
    ``heartbeat_interval_ms`` and ``holds`` (the holds it renewed)."""

    session: str
    ttl_ms: int
    heartbeat_interval_ms: int
    holds: int = 0
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SessionGrant":
        ttl_ms = int(data["ttl_ms"])
        return cls(
            session=str(data["session"]),
            ttl_ms=ttl_ms,
            heartbeat_interval_ms=int(data.get("heartbeat_interval_ms", ttl_ms // 3)),
            holds=int(data.get("holds", 0)),
            raw=dict(data),
        )

    # What renewal reads from every grant (a session's lease is its TTL).
    @property
    def holder(self) -> str:
        return self.session

    @property
    def lease_ms(self) -> int:
        return self.ttl_ms

    @property
    def expires_in_ms(self) -> int:
        return self.ttl_ms

    def __repr__(self) -> str:
        return (
            f"SessionGrant(session={short_holder(self.session)!r}, ttl_ms={self.ttl_ms}, "
            f"holds={self.holds})"
        )


class SessionState(TypedDict, total=False):
    """``GET /sessions/{id}``."""

    session: str
    ttl_ms: int
    expires_in_ms: int
    holds: int
    owner: Optional[str]


class RateLimiterState(TypedDict):
    """``GET``/``PUT /rate-limiters/{name}``: the configuration and the
    permits ``available`` now (of one key's bucket with ``key``)."""

    name: str
    rate: int
    per_ms: int
    burst: int
    available: int


class RateAcquired(TypedDict):
    """An admitted rate-limiter acquire: ``{"permits", "available"}``."""

    permits: int
    available: int


class LimitAcquired(TypedDict):
    """One limit of an admitted several-limits acquire."""

    name: str
    key: Optional[str]
    permits: int
    available: int


@dataclass(frozen=True)
class Limit:
    """One limit of ``acquire_limits``: ``permits`` from the limiter
    ``name``, from ``key``'s own bucket (``None``: the shared bucket)."""

    name: str
    key: Optional[str] = None
    permits: int = 1

    def to_json(self) -> Dict[str, Any]:
        body: Dict[str, Any] = {"name": self.name, "permits": self.permits}
        if self.key is not None:
            body["key"] = self.key
        return body
