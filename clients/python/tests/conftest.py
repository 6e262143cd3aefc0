"""Fixtures: a real latchkey at $LATCHKEY_URL (no mocks), unique names."""

from __future__ import annotations

import os
import uuid
from typing import Callable, Iterator

import httpx
import pytest

import latchkey


@pytest.fixture(scope="session")
def url() -> str:
    value = os.environ.get("LATCHKEY_URL")
    if not value:
        pytest.fail(
            "LATCHKEY_URL is not set: these tests run against a real latchkey "
            "(e.g. LATCHKEY_URL=http://127.0.0.1:8080 after scripts/dev.sh)",
            pytrace=False,
        )
    try:
        ready = httpx.get(value.rstrip("/") + "/readyz", timeout=5)
    except httpx.HTTPError as error:
        pytest.fail(f"latchkey at LATCHKEY_URL={value} does not answer: {error!r}", pytrace=False)
    if ready.status_code != 200:
        pytest.fail(f"latchkey at {value} is not ready: {ready.status_code} {ready.text}", pytrace=False)
    return value


@pytest.fixture(autouse=True)
def _service(url: str) -> None:
    """Every test needs the service: fail (never skip) without it."""


@pytest.fixture
def lk(url: str) -> Iterator[latchkey.Client]:
    with latchkey.Client(url) as client:
        yield client


@pytest.fixture
def other(url: str) -> Iterator[latchkey.Client]:
    """A second, independent client (another process, as far as the
    service can tell)."""
    with latchkey.Client(url) as client:
        yield client


@pytest.fixture
def name() -> Callable[[str], str]:
    """Unique object names, so tests never share state."""

    def make(prefix: str = "py") -> str:
        return f"{prefix}-{uuid.uuid4().hex[:12]}"

    return make

