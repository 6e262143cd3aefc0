// Rate limiters: configure, acquire, refusal with retryAfterMs, a wait,
// idempotent acquires, keys, and several limits at once.

import assert from "node:assert/strict";
import { test } from "node:test";
import { NotFoundError, OutOfRangeError, RateLimitedError } from "latchkey";
import { answerDroppingProxy, client, unique } from "./helpers.js";

test("a rate limiter is configured, admits its burst, then refuses with retryAfterMs", async () => {
  const lk = client();
  const limiter = lk.rateLimiter(unique("rate"));
  assert.deepEqual(await limiter.configure({ rate: 2, perMs: 60_000, burst: 2 }), {
    name: limiter.name,
    rate: 2,
    perMs: 60_000,
    burst: 2,
    available: 2,
  });
  assert.deepEqual(await limiter.acquire(), { permits: 1, available: 1 });
  assert.deepEqual(await limiter.acquire(), { permits: 1, available: 0 });
  const refused = await limiter.acquire().then(
    () => assert.fail("a third permit within the minute was admitted"),
    (error: unknown) => error,
  );
  assert.ok(refused instanceof RateLimitedError, String(refused));
  assert.equal(refused.status, 429);
  assert.equal(refused.slug, "rate-limited");
  assert.equal(refused.available, 0);
  // One permit every 30 s: the next one is due within that.
  assert.ok(refused.retryAfterMs !== undefined && refused.retryAfterMs > 0 && refused.retryAfterMs <= 30_000);
  assert.equal(refused.limit, undefined);
  assert.equal((await limiter.state()).available, 0);
  await assert.rejects(limiter.acquire({ permits: 3 }), OutOfRangeError);
  assert.equal(await limiter.delete(), true);
  await assert.rejects(limiter.state(), NotFoundError);
  await assert.rejects(limiter.acquire(), NotFoundError);
});

test("a wait is admitted when the permits come within it, refused at once when they come later", async () => {
  const lk = client();
  const limiter = lk.rateLimiter(unique("rate-wait"));
  await limiter.configure({ rate: 1, perMs: 1500 }); // one permit every 1.5 s
  await limiter.acquire();
  // The next permit comes within the wait: reserved, answered when due.
  assert.deepEqual(await limiter.acquire({ waitMs: 5000 }), { permits: 1, available: 0 });
  // The next one is 1.5 s away, with 10 ms to wait: refused at once, nothing reserved.
  const refused = await limiter.acquire({ waitMs: 10 }).catch((error: unknown) => error);
  assert.ok(refused instanceof RateLimitedError, String(refused));
  assert.ok(refused.retryAfterMs! > 10);
  // A wait as long as the hint is admitted.
  assert.equal((await limiter.acquire({ waitMs: refused.retryAfterMs! + 1000 })).permits, 1);
  await limiter.delete();
});

test("an aborted wait rejects with the signal's reason", async () => {
  const lk = client();
  const limiter = lk.rateLimiter(unique("rate-abort"));
  await limiter.configure({ rate: 1, perMs: 5000 });
  await limiter.acquire();
  const controller = new AbortController();
  const reason = new Error("the caller went away");
  const waiting = limiter.acquire({ waitMs: 10_000, signal: controller.signal });
  setTimeout(() => controller.abort(reason), 100);
  await assert.rejects(waiting, (error: unknown) => error === reason);
  await limiter.delete();
});

test("an acquire sent again with its idempotencyKey counts once and replays the first answer", async () => {
  const lk = client();
  const limiter = lk.rateLimiter(unique("rate-idem"));
  await limiter.configure({ rate: 3, perMs: 60_000 });
  const key = unique("idem");
  const first = await limiter.acquire({ permits: 2, idempotencyKey: key });
  assert.deepEqual(first, { permits: 2, available: 1 });
  assert.deepEqual(await limiter.acquire({ permits: 2, idempotencyKey: key }), first);
  assert.equal((await limiter.state()).available, 1);
  await limiter.delete();
});

test("each key has its own bucket, and the shared bucket is another one", async () => {
  const lk = client();
  const limiter = lk.rateLimiter(unique("rate-keys"));
  await limiter.configure({ rate: 1, perMs: 60_000 });
  assert.deepEqual(await limiter.acquire({ key: "user-1" }), { permits: 1, available: 0 });
  const refused = await limiter.acquire({ key: "user-1" }).catch((error: unknown) => error);
  assert.ok(refused instanceof RateLimitedError, String(refused));
  assert.ok(refused.retryAfterMs! > 0);
  // Another key, and the shared bucket, are untouched.
  assert.equal((await limiter.state({ key: "user-2" })).available, 1);
  assert.deepEqual(await limiter.acquire({ key: "user-2" }), { permits: 1, available: 0 });
  assert.equal((await limiter.state({ key: "user-1" })).available, 0);
  assert.equal((await limiter.state()).available, 1);
  assert.deepEqual(await limiter.acquire(), { permits: 1, available: 0 });
  await limiter.delete();
});

test("several limits are taken all or nothing; a refusal names the limit and leaves the others as they were", async () => {
  const lk = client();
  const perIp = lk.rateLimiter(unique("rate-ip"));
  const global = lk.rateLimiter(unique("rate-global"));
  await perIp.configure({ rate: 1, perMs: 60_000 });
  await global.configure({ rate: 10, perMs: 60_000 });
  const limits = [{ name: perIp.name, key: "203.0.113.7" }, { name: global.name }];
  assert.deepEqual(await lk.acquireLimits(limits), [
    { name: perIp.name, key: "203.0.113.7", permits: 1, available: 0 },
    { name: global.name, key: null, permits: 1, available: 9 },
  ]);
  const refused = await lk.acquireLimits(limits).catch((error: unknown) => error);
  assert.ok(refused instanceof RateLimitedError, String(refused));
  assert.deepEqual(refused.limit, { name: perIp.name, key: "203.0.113.7" });
  assert.ok(refused.retryAfterMs! > 0);
  // Nothing was taken from the global limit by the refused call.
  assert.equal((await global.state()).available, 9);
  // Another IP passes, and takes from both.
  const [ip, all] = await lk.acquireLimits([{ name: perIp.name, key: "203.0.113.8" }, { name: global.name, permits: 2 }]);
  assert.equal(ip!.available, 0);
  assert.equal(all!.available, 7);
  // A limiter never configured: 404 naming it, nothing taken.
  const missing = unique("rate-missing");
  const notFound = await lk
    .acquireLimits([{ name: global.name }, { name: missing }])
    .catch((error: unknown) => error);
  assert.ok(notFound instanceof NotFoundError, String(notFound));
  assert.deepEqual(notFound.limit, { name: missing, key: null });
  assert.equal((await global.state()).available, 7);
  await perIp.delete();
  await global.delete();
});

test(
  "an acquire with a wait whose answer was lost is not sent again without an idempotencyKey (it may have been admitted)",
  async () => {
    const limiter = client().rateLimiter(unique("rate-lost-answer"));
    await limiter.configure({ rate: 1, perMs: 600_000, burst: 5 });
    const proxy = await answerDroppingProxy((method, path) => method === "POST" && path.endsWith("/acquire"));
    try {
      const through = client({ url: proxy.url }).rateLimiter(limiter.name);
      // Either outcome is fine for the caller (an error, or the answer of
      // a repeat that the service counts once); two takes are not.
      await through.acquire({ waitMs: 1000 }).catch(() => undefined);
      assert.equal((await limiter.state()).available, 4, "one acquire of one permit took one permit");
    } finally {
      proxy.close();
      await limiter.delete();
    }
  },
);
