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
