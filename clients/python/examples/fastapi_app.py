"""A FastAPI endpoint that runs one export per customer at a time, across
every replica of the app, and stops if it loses the lock."""

import asyncio
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException, Request

import latchkey


@asynccontextmanager
async def lifespan(app: FastAPI):
    # LATCHKEY_URL and LATCHKEY_API_KEY come from the environment.
    async with latchkey.AsyncClient() as lk:
        app.state.lk = lk
        yield


app = FastAPI(lifespan=lifespan)


@app.post("/customers/{customer}/export")
async def export(customer: str, request: Request) -> dict:
    lk: latchkey.AsyncClient = request.app.state.lk
    try:
        async with lk.lock(f"export-{customer}", lease_ms=15_000, wait_ms=2_000) as grant:
            rows = await run_export(customer, fencing_token=grant.fencing_token)
            grant.check()  # raises HoldLost if the lock was lost meanwhile
            return {"customer": customer, "rows": rows, "fencing_token": grant.fencing_token}
    except latchkey.NotAcquired as busy:
        seconds = max(1, -(-(busy.retry_after_ms or 1000) // 1000))
        raise HTTPException(409, "an export of this customer is running",
                            headers={"Retry-After": str(seconds)})


async def run_export(customer: str, fencing_token: int) -> int:
    """Your work; pass the token to what you write so it can refuse a stale holder."""
    await asyncio.sleep(0.2)
    return 42
