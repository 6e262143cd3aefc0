"""The FastAPI examples of the book and the README, served by FastAPI's test client against the
real service."""

from __future__ import annotations

import importlib.util
import pathlib
import uuid

import latchkey
from fastapi.testclient import TestClient

EXAMPLE = pathlib.Path(__file__).parent.parent / "examples" / "fastapi_app.py"


def load_example():
    return load(EXAMPLE, "fastapi_app")


def test_the_fastapi_example_exports_under_the_lock_and_answers_409_while_held(
    other: latchkey.Client,
) -> None:
    example = load_example()
    customer = f"c-{uuid.uuid4().hex[:8]}"
    with TestClient(example.app) as http:
        done = http.post(f"/customers/{customer}/export")
        assert done.status_code == 200, done.text
        body = done.json()
        assert body["customer"] == customer and body["rows"] == 42
        assert body["fencing_token"] >= 1
        with other.lock(f"export-{customer}", lease_ms=5_000):
            busy = http.post(f"/customers/{customer}/export")
            assert busy.status_code == 409, busy.text
            assert int(busy.headers["retry-after"]) >= 1
        again = http.post(f"/customers/{customer}/export")
        assert again.status_code == 200
        assert again.json()["fencing_token"] > body["fencing_token"]


def test_the_book_shows_the_example_as_it_is_tested() -> None:
    chapter = (pathlib.Path(__file__).parents[3] / "docs" / "src" / "client-tools.md").read_text()
    assert EXAMPLE.read_text().strip() in chapter, "docs/src/client-tools.md embeds examples/fastapi_app.py"


RATE_EXAMPLE = pathlib.Path(__file__).parent.parent / "examples" / "fastapi_rate_limit.py"


def load(path: pathlib.Path, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rate_limit_example_limits_each_user_on_its_own() -> None:
    example = load(RATE_EXAMPLE, "fastapi_rate_limit")
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    with TestClient(example.app) as http:
        for _ in range(10):
            admitted = http.get("/orders", headers={"X-User": alice})
            assert admitted.status_code == 200, admitted.text
            assert admitted.json() == {"user": alice, "orders": []}
        refused = http.get("/orders", headers={"X-User": alice})
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) >= 1
        # Another user has a bucket of their own.
        assert http.get("/orders", headers={"X-User": bob}).status_code == 200


def test_the_client_readme_shows_the_rate_limit_example_as_it_is_tested() -> None:
    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    assert RATE_EXAMPLE.read_text().strip() in readme, "clients/python/README.md embeds examples/fastapi_rate_limit.py"
