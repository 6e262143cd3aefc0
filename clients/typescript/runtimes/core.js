// The client's core test, written once and run by every runtime's entry
// (bun.js, deno.js, worker.js, edge.js): the *built* client (dist/, ESM)
// against a real latchkey. It throws on the first failed check and
// resolves with a short account of what it saw.
//
// Only what every runtime has: fetch, AbortSignal, setTimeout,
// crypto.randomUUID. No `node:` import, no `process` (the example reads
// LATCHKEY_URL and LATCHKEY_API_KEY from `process.env`, as it says: every
// runtime's entry gives it one).

import { HoldLostError, Latchkey, NotAcquiredError, RateLimitedError, SessionLostError } from "../dist/index.js";
// The edge-function examples of the book's "Client tools"
// (docs/src/client-tools.md: examples/edge-function.ts) and of the
// client's README (examples/rate-limit-edge.ts), bundled by run.sh each
// with its own copy of the client, as a deployed function has it.
import example from "./build/edge-function.js";
import limited, { PER_IP, SITE } from "./build/rate-limit-edge.js";

/** An error thrown by a failed check. */
export class CheckFailed extends Error {
  name = "CheckFailed";
}

function check(condition, what) {
  if (!condition) throw new CheckFailed(what);
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** A name no other run uses. */
function unique(what) {
  return `rt-${what}-${crypto.randomUUID().slice(0, 8)}`;
}

/** Resolves true when the signal aborts, false after `ms`. */
function abortedWithin(signal, ms) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(true);
    const timer = setTimeout(() => resolve(false), ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve(true);
      },
      { once: true },
    );
  });
}

/** Rejects after `ms` with what was being awaited, so that no step hangs a runtime. */
function within(ms, what, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new CheckFailed(`${what}: not done within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Runs the core test. `url` and `apiKey` come from the runtime's
 * environment (LATCHKEY_URL, LATCHKEY_API_KEY); `runtime` names it in the
 * account. `example: false` leaves out the edge-function examples (for a Worker
 * without `process.env`, where the examples' `new Latchkey()` cannot find
 * the service).
 */
export async function runCore({ url, apiKey, runtime, example: withExample = true }) {
  check(typeof url === "string" && url !== "", "LATCHKEY_URL is not set");
  const steps = [];
  const lk = new Latchkey({ url, apiKey });
  const other = new Latchkey({ url, apiKey, owner: `runtimes test (${runtime}) other` });

  // Acquire, renewed in the background past its lease (more than 3 leases).
  const name = unique("lock");
  const hold = await lk.lock(name, { leaseMs: 600 });
  check(hold.leaseMs === 600, `leaseMs ${hold.leaseMs}, not 600`);
  check(hold.heartbeatIntervalMs === 200, `heartbeatIntervalMs ${hold.heartbeatIntervalMs}, not 200`);
  const token = hold.fencingToken;
  check(Number.isInteger(token) && token > 0, `fencing token ${token}`);
  await sleep(2000);
  check(!hold.lost && !hold.signal.aborted, "the hold was lost while it was renewed");
  check(hold.fencingToken === token, "the fencing token changed on renewal");
  const state = await other.lockState(name);
  check(state.locked === true, "the lock is not held after 3 leases: the hold was not renewed");
  check(state.fencingToken === token, `state's fencing token ${state.fencingToken}, not ${token}`);
  let refused = false;
  try {
    const intruder = await other.lock(name, { waitMs: 0 });
    await intruder.release();
  } catch (error) {
    refused = error instanceof NotAcquiredError;
    if (!refused) throw error;
  }
  check(refused, "another client got the lock while it was held");
  const owner = state.holds?.[0]?.owner ?? null;
  check(typeof owner === "string" && owner !== "", `the hold's owner label is ${JSON.stringify(owner)}`);
  steps.push(`lock renewed past 3 leases of 600 ms (token ${token}, owner "${owner}")`);

  // Forced free (DELETE /locks/{name}): the hold sees it lost.
  check((await other.forceUnlock(name)) === true, "force unlock found the lock free");
  check(await abortedWithin(hold.signal, 2000), "the hold's signal did not abort within 2 s of the force unlock");
  check(hold.lost === true, "hold.lost is false after its signal aborted");
  const reason = hold.signal.reason;
  check(reason instanceof HoldLostError, `the signal's reason is ${reason}, not a HoldLostError`);
  check(reason.reason === "not-held", `the loss's reason is ${reason.reason}, not not-held`);
  let threw = false;
  try {
    hold.throwIfLost();
  } catch (error) {
    threw = error instanceof HoldLostError;
  }
  check(threw, "throwIfLost() did not throw HoldLostError on a lost hold");
  await hold.release(); // a 404 on a lost hold is ignored
  steps.push("force unlock: hold lost (not-held), release of the lost hold resolved");

  // Release: the lock is free afterwards.
  const again = await lk.lock(name, { leaseMs: 5000 });
  check(again.fencingToken > token, "a new grant's fencing token did not grow");
  await again.release();
  check(again.released === true, "hold.released is false after release()");
  check((await other.lockState(name)).locked === false, "the lock is still held after release()");
  steps.push("acquire and release: free afterwards");

  // A latch wait woken by a count-down.
  const latch = lk.latch(unique("latch"));
  await latch.set(1, { ttlMs: 60000 });
  let woken = false;
  const waiting = latch.wait({ waitMs: 10000 }).then((count) => {
    woken = true;
    return count;
  });
  await sleep(300);
  check(!woken, "the latch wait returned before the count-down");
  const counted = await other.latch(latch.name).countDown();
  check(counted.count === 0 && counted.open === true, `count-down answered ${JSON.stringify(counted)}`);
  const seen = await within(5000, "the latch wait after its count-down", waiting);
  check(seen.open === true && seen.count === 0, `the latch wait resolved with ${JSON.stringify(seen)}`);
  steps.push("latch wait woken by a count-down");

  await runRateLimit(lk, steps);
  await runSession(lk, other, { url, apiKey }, steps);
  if (withExample) {
    await runExample(other, steps);
    await runRateLimitExample(lk, steps);
  }
  return { runtime, ok: true, steps };
}

/**
 * The rate-limit example: 2 a minute per IP and 3 a minute in all, taken
 * with one call; a refusal by either limit is a 429 naming it and takes
 * nothing from the other. Its limiters have fixed names (the example's),
 * so runs of it must not overlap: run.sh runs the runtimes one by one.
 */
async function runRateLimitExample(lk, steps) {
  const perIp = lk.rateLimiter(PER_IP);
  const site = lk.rateLimiter(SITE);
  await perIp.delete().catch(() => false);
  await site.delete().catch(() => false);
  await perIp.configure({ rate: 2, perMs: 60000 });
  await site.configure({ rate: 3, perMs: 60000 });
  const visit = (ip) =>
    limited.fetch(new Request("http://edge.example/", { headers: { "x-forwarded-for": `${ip}, 10.0.0.1` } }));
  try {
    // What an IP has taken stays taken across a DELETE and a new PUT of the
    // limiter, so each run takes fresh addresses: 32 random bits of the
    // IPv6 documentation prefix (a random octet of 200 once collided).
    const run = crypto.randomUUID();
    const net = `2001:db8:${run.slice(0, 4)}:${run.slice(4, 8)}`;
    const [a, b, c] = [`${net}::a`, `${net}::b`, `${net}::c`];
    for (let i = 0; i < 2; i++) {
      const ok = await visit(a);
      const text = await ok.text();
      check(ok.status === 200 && text === `hello, ${a}\n`, `visit ${i + 1} from ${a}: ${ok.status} ${text}`);
    }
    const perIpRefusal = await visit(a);
    const perIpBody = await perIpRefusal.json();
    check(perIpRefusal.status === 429, `a 3rd visit from one IP answered ${perIpRefusal.status}, not 429`);
    check(perIpBody.limit === PER_IP, `the per-IP refusal names ${JSON.stringify(perIpBody)}`);
    check(Number(perIpRefusal.headers.get("Retry-After")) >= 1, "the per-IP refusal has no Retry-After");
    const siteLeft = (await site.state()).available;
    check(siteLeft === 1, `the per-IP refusal took from the site's limit: ${siteLeft} left, not 1`);
    const other = await visit(b);
    await other.body?.cancel();
    check(other.status === 200, `a visit from another IP answered ${other.status}`);
    const siteRefusal = await visit(c);
    const siteBody = await siteRefusal.json();
    check(siteRefusal.status === 429 && siteBody.limit === SITE, `the 4th visit in all: ${siteRefusal.status} ${JSON.stringify(siteBody)}`);
    const cLeft = (await perIp.state({ key: c })).available;
    check(cLeft === 2, `the site's refusal took from ${c}'s own limit: ${cLeft} left, not 2`);
  } finally {
    await perIp.delete();
    await site.delete();
  }
  steps.push("the README's rate-limit example: 429 naming the per-IP limit, then the site's, each taking nothing from the other");
}

/** A rate limiter's shared bucket: admitted up to its burst, then refused with a retry time. */
async function runRateLimit(lk, steps) {
  const limiter = lk.rateLimiter(unique("rate"));
  await limiter.configure({ rate: 2, perMs: 60000 });
  try {
    const first = await limiter.acquire();
    check(first.permits === 1 && first.available === 1, `the first acquire answered ${JSON.stringify(first)}`);
    const second = await limiter.acquire();
    check(second.available === 0, `the second acquire answered ${JSON.stringify(second)}`);
    let refusal;
    try {
      await limiter.acquire();
    } catch (error) {
      refusal = error;
    }
    check(refusal instanceof RateLimitedError, `the third acquire was not refused with RateLimitedError: ${refusal}`);
    check(refusal.retryAfterMs > 0, `the refusal's retryAfterMs is ${refusal.retryAfterMs}`);
    steps.push(`rate limiter (2 a minute): 2 admitted, the 3rd refused (retry after ${refusal.retryAfterMs} ms)`);
  } finally {
    await limiter.delete();
  }
}

/**
 * A session renewed in the background past its TTL with a lock in it,
 * closed (which releases the lock); another deleted from outside
 * (`DELETE /sessions/{id}`), which its signal and its hold's tell.
 */
async function runSession(lk, other, { url, apiKey }, steps) {
  const name = unique("session-lock");
  const session = await lk.session({ ttlMs: 600 });
  const held = await lk.lock(name, { session });
  await sleep(2000);
  check(!session.lost && !held.lost, "the session or its hold was lost while the session was renewed");
  check((await other.lockState(name)).locked === true, "the lock in the session is free after 3 TTLs: not renewed");
  check((await session.state()).holds === 1, "the session does not count its hold");
  await session.close();
  check(session.released === true && held.released === true, "close() did not release the session and its hold");
  check((await other.lockState(name)).locked === false, "the lock is still held after the session closed");
  steps.push("session renewed past 3 TTLs of 600 ms with a lock in it; close() released the lock");

  const doomed = await lk.session({ ttlMs: 900 });
  const hold = await lk.lock(name, { session: doomed });
  const response = await fetch(`${url}/sessions/${encodeURIComponent(doomed.id)}`, {
    method: "DELETE",
    headers: apiKey ? { Authorization: `Bearer ${apiKey}` } : {},
  });
  await response.body?.cancel();
  check(response.status === 200, `DELETE /sessions/{id} answered ${response.status}`);
  check(await abortedWithin(doomed.signal, 3000), "the session's signal did not abort within 3 s of its deletion");
  check(doomed.signal.reason instanceof SessionLostError, `the session's loss is ${doomed.signal.reason}`);
  check(hold.lost && hold.signal.reason instanceof HoldLostError, "the hold in the deleted session is not lost");
  check(hold.signal.reason.reason === "session-lost", `the hold's loss is ${hold.signal.reason.reason}`);
  await doomed.close(); // its 404 is ignored on a lost session
  steps.push("session deleted from outside: its signal and its hold's aborted (session-lost)");
}

/**
 * The edge-function example of the book's "Client tools"
 * (docs/src/client-tools.md), called as the runtime would call it.
 */
async function runExample(other, steps) {
  const orderId = unique("order");
  const order = () =>
    new Request("http://edge.example/orders", { method: "POST", body: JSON.stringify({ orderId }) });
  const charged = await example.fetch(order());
  const receipt = await charged.json();
  check(charged.status === 200, `the example answered ${charged.status}: ${JSON.stringify(receipt)}`);
  check(receipt.fencingToken > 0, `the example's fencing token ${receipt.fencingToken}`);
  check(
    receipt.receipt === `charged ${orderId} with token ${receipt.fencingToken}`,
    `the example's receipt ${JSON.stringify(receipt.receipt)}`,
  );
  const blocker = await other.lock(`order-${orderId}`, { leaseMs: 10000 });
  try {
    const busy = await example.fetch(order());
    const answer = await busy.json();
    check(busy.status === 409, `the example answered ${busy.status}, not 409, while the order was locked`);
    check(answer.busy === true && answer.orderId === orderId, `the example's busy answer ${JSON.stringify(answer)}`);
    check(Number(busy.headers.get("Retry-After")) >= 1, `Retry-After ${busy.headers.get("Retry-After")}`);
  } finally {
    await blocker.release();
  }
  steps.push("the book's edge-function example: charged under the lock, 409 busy while another holds it");
}

/** The environment's LATCHKEY_URL and LATCHKEY_API_KEY, as `get(name)` gives them. */
export function settings(get, runtime) {
  return { url: get("LATCHKEY_URL"), apiKey: get("LATCHKEY_API_KEY") || undefined, runtime };
}
