"""Helpers shared by the test modules."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import uuid
from typing import Any, Awaitable, Callable, Dict, List, TypeVar

import httpx

import latchkey

T = TypeVar("T")


def run_async(fn: Callable[..., Awaitable[T]]) -> Callable[..., T]:
    """Runs an async test function on a fresh event loop (no plugin needed)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        async def main() -> T:
            return await fn(*args, **kwargs)

        return asyncio.run(main())

    return wrapper


def server_max_wait_ms(url: str) -> int:
    """The service's longest long-poll, from its 400 answer to a longer one."""
    key = os.environ.get("LATCHKEY_API_KEY")
    answer = httpx.post(
        url.rstrip("/") + f"/locks/probe-{uuid.uuid4().hex[:8]}/acquire",
        json={"wait_ms": 10**12},
        headers={"Authorization": f"Bearer {key}"} if key else {},
        timeout=5,
    )
    assert answer.status_code == 400, answer.text
    problem = answer.json()
    assert problem["field"] == "wait_ms", problem
    maximum = problem.get("maximum", 60_000)
    assert isinstance(maximum, int)
    return maximum


class Spy:
    """Records the acquire requests a client sends (it still sends them to
    the real service)."""

    def __init__(self, client: latchkey.Client) -> None:
        self.calls: List[Dict[str, Any]] = []
        perform = client._perform

        def spying(call: Any) -> Any:
            if call.path.endswith("/acquire"):
                self.calls.append(dict(call.json))
            return perform(call)

        client._perform = spying  # type: ignore[method-assign]


def later(seconds: float, fn: Callable[[], Any]) -> threading.Timer:
    """Calls ``fn`` in ``seconds`` on another thread; join it before the
    test's clients close."""
    timer = threading.Timer(seconds, fn)
    timer.start()
    return timer


# The queued primitives, for the tests of a wait that gives up.
QUEUED_KINDS = ("fair-lock", "write-lock", "read-lock", "semaphore")


class Queued:
    """One queued primitive (fair lock, either side of a read-write lock, a
    semaphore of one permit): the blocker's acquisition, a waiter's, and
    the try that must be granted once the blocker released if the waiter
    that gave up left no place behind. Every method takes a ``Client`` or
    an ``AsyncClient`` (and returns what its calls return)."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name

    def configure(self, client: Any) -> Any:
        """The semaphore's one permit (``None`` for the other kinds)."""
        return client.semaphore(self.name).configure(1) if self.kind == "semaphore" else None

    def blocker(self, client: Any) -> Any:
        return self._side(client, blocker=True, lease_ms=30_000)

    def waiter(self, client: Any, **options: Any) -> Any:
        return self._side(client, blocker=False, **options)

    def attempt(self, client: Any) -> Any:
        """A try (``wait_ms`` 0); on an rwlock a write, which is refused
        while anyone is queued ahead."""
        if self.kind in ("write-lock", "read-lock"):
            return client.write_lock(self.name)
        return self._side(client, blocker=False)

    def state(self, client: Any) -> Any:
        if self.kind == "fair-lock":
            return client.fair_lock_state(self.name)
        if self.kind == "semaphore":
            return client.semaphore(self.name).state()
        return client.rwlock_state(self.name)

    def _side(self, client: Any, *, blocker: bool, **options: Any) -> Any:
        if self.kind == "fair-lock":
            return client.fair_lock(self.name, **options)
        if self.kind == "semaphore":
            return client.semaphore_permits(self.name, 1, **options)
        # A writer waits behind a reader, a reader behind a writer.
        write = (self.kind == "write-lock") != blocker
        return (client.write_lock if write else client.read_lock)(self.name, **options)
