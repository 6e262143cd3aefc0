"""What the asyncio client does differently from the threaded one: the
background renewal runs as an asyncio task, waits are ``asyncio.sleep``,
and a call is bounded by ``asyncio.wait_for``. ``_backend_sync`` has the
same names for threads; ``_async.py`` imports this module and its
generated twin ``_sync.py`` imports that one."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable, Callable, Optional

from ._core import NoAnswer, Outcome

__all__ = ["Event", "Mutex", "Renewer", "bounded", "resolve", "sleep"]

#: A hold's ``lost`` signal: ``await hold.lost.wait()``.
Event = asyncio.Event


class Mutex:
    """Nothing to exclude: the code between two awaits runs alone on the
    event loop (the threaded twin is a ``threading.RLock``)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


async def sleep(seconds: float) -> None:
    await asyncio.sleep(max(0.0, seconds))


async def bounded(call: Awaitable[Outcome], seconds: Optional[float]) -> Outcome:
    """``call``'s outcome, or ``NoAnswer`` when it takes longer than
    ``seconds`` (the threaded twin bounds the request by its timeouts)."""
    try:
        return await asyncio.wait_for(call, seconds)
    except asyncio.TimeoutError as timed_out:
        return NoAnswer(timed_out)


async def resolve(value: Any) -> Any:
    """Await what a callback returned when it is awaitable (a coroutine
    function may be passed as a callback)."""
    if inspect.isawaitable(value):
        return await value
    return value


class Renewer:
    """Runs a renewal loop in the background (an asyncio task) until
    ``stop()``; ``on_crash`` is told if the loop fails."""

    def __init__(self, name: str, on_crash: Callable[[BaseException], None]) -> None:
        self._name = name
        self._on_crash = on_crash
        self._stopping = False
        self._task: "Optional[asyncio.Task[None]]" = None

    def start(self, loop: Callable[[], Awaitable[None]]) -> None:
        async def main() -> None:
            try:
                await loop()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep the task's failure visible
                self._on_crash(exc)

        self._task = asyncio.get_running_loop().create_task(main(), name=self._name)

    @property
    def stopping(self) -> bool:
        return self._stopping

    async def pause(self, seconds: float) -> bool:
        """Sleep ``seconds``; true when the renewal is to stop."""
        if not self._stopping:
            await asyncio.sleep(max(0.0, seconds))
        return self._stopping

    async def stop(self) -> None:
        # The flag as well as the cancellation: asyncio.wait_for (in a
        # heartbeat) can swallow a cancellation that arrives as the
        # heartbeat completes, and the loop would then go on renewing.
        self._stopping = True
        task = self._task
        if task is None or task.done() or task is asyncio.current_task():
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
