"""What the threaded client does differently from the asyncio one (see
``_backend_async``, which has the same names): the background renewal runs
in a daemon thread, waits are ``time.sleep``, and a call is bounded by its
own timeouts."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

from ._core import Outcome

__all__ = ["Event", "Mutex", "Renewer", "bounded", "resolve", "sleep"]

#: A hold's ``lost`` signal: ``hold.lost.wait(timeout)`` or ``is_set()``.
Event = threading.Event

#: Guards a hold's state between the renewing thread and its callers.
Mutex = threading.RLock


def sleep(seconds: float) -> None:
    time.sleep(max(0.0, seconds))


def bounded(outcome: Outcome, seconds: Optional[float]) -> Outcome:
    """The call already ran, bounded by its request timeouts
    (``HttpCall.deadline_s``)."""
    return outcome


def resolve(value: Any) -> Any:
    return value


class Renewer:
    """Runs a renewal loop in a daemon thread until ``stop()``;
    ``on_crash`` is told if the loop fails."""

    def __init__(self, name: str, on_crash: Callable[[BaseException], None]) -> None:
        self._name = name
        self._on_crash = on_crash
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self, loop: Callable[[], None]) -> None:
        def main() -> None:
            try:
                loop()
            except BaseException as exc:  # noqa: BLE001 - keep the thread's failure visible
                self._on_crash(exc)

        self._thread = threading.Thread(target=main, name=self._name, daemon=True)
        self._thread.start()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def pause(self, seconds: float) -> bool:
        """Sleep ``seconds``; true when the renewal is to stop."""
        return self._stop.wait(max(0.0, seconds))

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and thread.is_alive():
            thread.join()
