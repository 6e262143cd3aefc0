"""A FastAPI dependency that limits each user to 10 requests a minute, and
the whole API to 1000, across every replica of the app: one call takes a
permit from both limits or from neither."""

from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Header, HTTPException, Request

import latchkey

PER_USER, EVERYONE = "api-per-user", "api-everyone"


@asynccontextmanager
async def lifespan(app: FastAPI):
    # LATCHKEY_URL and LATCHKEY_API_KEY come from the environment. Configuring
    # is an admin operation; a PUT of the same configuration changes nothing.
    async with latchkey.AsyncClient() as lk:
        await lk.rate_limiter(PER_USER).configure(rate=10, per_ms=60_000)
        await lk.rate_limiter(EVERYONE).configure(rate=1_000, per_ms=60_000)
        app.state.lk = lk
        yield


app = FastAPI(lifespan=lifespan)


async def rate_limited(request: Request, x_user: str = Header()) -> str:
    """Admits the request or answers 429 with Retry-After."""
    lk: latchkey.AsyncClient = request.app.state.lk
    try:
        await lk.acquire_limits([latchkey.Limit(PER_USER, key=x_user), latchkey.Limit(EVERYONE)])
    except latchkey.RateLimited as limited:
        seconds = max(1, -(-(limited.retry_after_ms or 1000) // 1000))
        raise HTTPException(429, "too many requests", headers={"Retry-After": str(seconds)})
    return x_user


@app.get("/orders")
async def orders(user: str = Depends(rate_limited)) -> dict:
    return {"user": user, "orders": []}
