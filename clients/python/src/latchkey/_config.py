"""Settings shared by the sync and asyncio clients."""

from __future__ import annotations

import os
import socket
import sys
import unicodedata
from typing import Dict, Optional

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"


def resolve_url(url: Optional[str]) -> str:
    """``url``, else ``$LATCHKEY_URL``, else ``http://127.0.0.1:8080``."""
    chosen = url or os.environ.get("LATCHKEY_URL") or DEFAULT_URL
    return chosen.rstrip("/")


def auth_headers(api_key: Optional[str]) -> Dict[str, str]:
    """``Authorization: Bearer`` with ``api_key``, else ``$LATCHKEY_API_KEY``,
    for a service with API keys configured; none without a key."""
    key = api_key or os.environ.get("LATCHKEY_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def client_timeout(
    timeout: float, server_wait_ms: int = 0, deadline_s: Optional[float] = None
) -> httpx.Timeout:
    """Each phase gets ``timeout`` seconds; reading also gets the time the
    service is asked to wait. ``deadline_s`` caps every phase (a heartbeat
    must not outlive the lease it renews)."""
    read = timeout + server_wait_ms / 1000
    connect = timeout
    if deadline_s is not None:
        cap = max(0.001, deadline_s)
        read, connect, timeout = min(read, cap), min(connect, cap), min(timeout, cap)
    return httpx.Timeout(timeout, connect=connect, read=read, write=timeout, pool=timeout)


def http_limits() -> httpx.Limits:
    # No cap on connections: a heartbeat must never queue behind long-polls
    # for a pooled connection.
    return httpx.Limits(max_connections=None, max_keepalive_connections=32)


# The longest owner label the service accepts, in bytes of UTF-8.
MAX_OWNER_BYTES = 200


def default_owner() -> str:
    """``"<host> pid <pid> <program>"``: who acquires, for people reading
    state reads and refusals (the program is ``sys.argv[0]``'s base name,
    else ``python``)."""
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return f"{socket.gethostname()} pid {os.getpid()} {program or 'python'}"


def clean_owner(label: Optional[str]) -> Optional[str]:
    """An owner label as the service accepts it: control characters become
    spaces, and it is cut to 200 bytes of UTF-8 on a character boundary.
    ``None`` (send none) for ``None`` or an empty label."""
    if not label:
        return None
    printable = "".join(" " if unicodedata.category(c) == "Cc" else c for c in label)
    cut = printable.encode("utf-8")[:MAX_OWNER_BYTES].decode("utf-8", "ignore")
    return cut or None
