"""Writes src/latchkey/_sync.py (``Client``, threads) from
src/latchkey/_async.py (``AsyncClient``, asyncio) with unasync: the async
file is the only source of the client's code.

    python scripts/gen_sync.py           # write _sync.py
    python scripts/gen_sync.py --check   # exit 1 if _sync.py is not what it writes

run-tests.sh runs the check before the tests. unasync drops ``async`` and
``await``, turns ``__aenter__``/``__aexit__``/``async with``/``async for``
into their plain forms, and renames the names below; what really differs
between the two (the background renewal: a task or a thread) is in
_backend_async.py and _backend_sync.py, which _async.py and _sync.py import.
"""

from __future__ import annotations

import pathlib
import shutil
import sys
import tempfile

import unasync

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "src" / "latchkey"

# Names of the asyncio client -> names of the sync client.
REPLACEMENTS = {
    "AsyncClient": "Client",  # ours, and httpx's
    "AsyncAcquisition": "Acquisition",
    "AsyncHold": "Hold",
    "AsyncMultiHold": "MultiHold",
    "AsyncSession": "Session",
    "AsyncSemaphore": "Semaphore",
    "AsyncLatch": "Latch",
    "AsyncRateLimiter": "RateLimiter",
    "AH": "H",
    "aclose": "close",
    "aread": "read",
    "aiter_lines": "iter_lines",
    "_backend_async": "_backend_sync",
}

HEADER = (
    "# Generated from _async.py by scripts/gen_sync.py (unasync): do not edit;\n"
    "# change _async.py and run `python scripts/gen_sync.py`.\n"
)


def generate() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        source = pathlib.Path(tmp, "_async", "client.py")
        source.parent.mkdir()
        shutil.copyfile(PACKAGE / "_async.py", source)
        unasync.unasync_files(
            [str(source)], [unasync.Rule("/_async/", "/_sync/", additional_replacements=REPLACEMENTS)]
        )
        return HEADER + pathlib.Path(tmp, "_sync", "client.py").read_text(encoding="utf-8")


def main(argv: list) -> int:
    target = PACKAGE / "_sync.py"
    generated = generate()
    if "--check" in argv:
        if target.read_text(encoding="utf-8") != generated:
            print(
                f"{target} is not generated from _async.py: edit _async.py, then run "
                "`python clients/python/scripts/gen_sync.py`",
                file=sys.stderr,
            )
            return 1
        return 0
    target.write_text(generated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
