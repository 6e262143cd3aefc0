// Waiting: total waits longer than one long-poll, single tries, aborts, and
// leaving the queue when a wait gives up.

import assert from "node:assert/strict";
import { test } from "node:test";
import { type Hold, Latchkey, NotAcquiredError } from "latchkey";
import { client, countingFetch, Queued, QUEUED_KINDS, serverMaxWaitMs, sleep, unique, URL_UNDER_TEST } from "./helpers.js";

test("a wait longer than the service's maximum is split into polls", async () => {
  const max = await serverMaxWaitMs();
  const holder = client();
  const name = unique("long");
  const held = await holder.lock(name, { leaseMs: 30000 });
  setTimeout(() => void held.release(), 1500);
  const counting = countingFetch(/\/acquire$/);
  const waiter = client({ fetch: counting.fetch });
  const t0 = performance.now();
  const hold = await waiter.lock(name, { waitMs: Math.max(max + 1000, 4000), leaseMs: 5000 });
  const took = performance.now() - t0;
  assert.ok(took >= 1300 && took < 10000, `granted after ${took.toFixed(0)} ms`);
  assert.ok(hold.fencingToken > held.fencingToken);
  // The first poll asked for more than the maximum (400, learning it), the
  // next ones waited at most the maximum each.
  if (max >= 5000) assert.equal(counting.count(), 2);
  else assert.ok(counting.count() >= 1 + Math.ceil(1300 / max), `${counting.count()} polls`);
  await hold.release();

  // The maximum is remembered: the next long wait goes straight to a poll of `max`.
  const before = counting.count();
  const again = await waiter.lock(name, { waitMs: max + 1000 });
  assert.equal(counting.count(), before + 1);
  await again.release();
});

test("waitMs: 0 tries once and rejects with NotAcquiredError and a retry hint", async () => {
  const a = client();
  const b = client();
  const name = unique("once");
  const hold = await a.lock(name, { leaseMs: 20000 });
  const t0 = performance.now();
  await assert.rejects(b.lock(name, { waitMs: 0 }), (error: unknown) => {
    assert.ok(error instanceof NotAcquiredError);
    assert.equal(error.status, 409);
    assert.equal(error.slug, "lock-held");
    assert.equal(error.problem?.type, "/problems/lock-held");
    assert.ok(typeof error.retryAfterMs === "number" && error.retryAfterMs > 10000, `${error.retryAfterMs}`);
    return true;
  });
  assert.ok(performance.now() - t0 < 1000);
  // A bounded wait ends with the same error when the lock stays held.
  const t1 = performance.now();
  await assert.rejects(b.lock(name, { waitMs: 400 }), NotAcquiredError);
  assert.ok(performance.now() - t1 >= 350);
  await hold.release();
});

test("an SSE wait that times out rejects with NotAcquiredError", async () => {
  const a = client();
  const name = unique("ssetimeout");
  const hold = await a.fairLock(name, { leaseMs: 20000 });
  const events: number[] = [];
  await assert.rejects(
    client().fairLock(name, { waitMs: 300, onWaiting: (e) => events.push(e.position ?? -1) }),
    (error: unknown) => {
      assert.ok(error instanceof NotAcquiredError);
      assert.equal(error.position, 0);
      return true;
    },
  );
  assert.ok(events.length >= 1);
  await hold.release();
});

test("an abort signal ends a wait, and nothing is left held", async () => {
  const a = client();
  const name = unique("abort");
  const hold = await a.lock(name, { leaseMs: 20000 });
  const controller = new AbortController();
  setTimeout(() => controller.abort(new Error("gave up")), 300);
  const t0 = performance.now();
  await assert.rejects(client().lock(name, { waitMs: 20000, signal: controller.signal }), /gave up/);
  assert.ok(performance.now() - t0 < 2000);
  await hold.release();
  await sleep(100);
  const state = await a.lockState(name);
  assert.equal(state.locked, false);
});

test("the URL defaults to LATCHKEY_URL", () => {
  assert.equal(new Latchkey().url, URL_UNDER_TEST.replace(/\/+$/, ""));
});

/** The blocker releases; a try is then granted at once: the waiter that gave up left no place behind. */
async function assertNoPlaceLeft(queued: Queued, blocker: Hold): Promise<void> {
  await blocker.release();
  let granted: Hold;
  try {
    granted = await queued.attempt();
  } catch (error) {
    assert.fail(`${queued.kind}: the waiter that gave up left a place behind: ${JSON.stringify((error as NotAcquiredError).problem)}`);
  }
  await granted.release();
}

for (const kind of QUEUED_KINDS) {
  test(`a wait that runs out leaves its queue: ${kind}`, async () => {
    const queued = new Queued(kind, client());
    const blocker = await queued.block();
    await assert.rejects(queued.waiter(client(), { waitMs: 400 }), NotAcquiredError);
    await assertNoPlaceLeft(queued, blocker);
  });

  test(`an aborted wait leaves its queue: ${kind}`, async () => {
    const queued = new Queued(kind, client());
    const blocker = await queued.block();
    const controller = new AbortController();
    // With a holder id of the caller's (one the client made is left the same way).
    const waiting = queued.waiter(client(), { waitMs: 20000, holder: unique("own"), signal: controller.signal });
    await queued.untilWaiting();
    controller.abort(new Error("gave up"));
    await assert.rejects(waiting, /gave up/);
    await assertNoPlaceLeft(queued, blocker);
  });
}

test("an aborted wait with onWaiting (Server-Sent Events) leaves its queue", async () => {
  const queued = new Queued("fair-lock", client());
  const blocker = await queued.block();
  const controller = new AbortController();
  const waiting = queued.waiter(client(), {
    waitMs: 20000,
    holder: unique("own"),
    signal: controller.signal,
    onWaiting: () => controller.abort(new Error("gave up on the first event")),
  });
  await assert.rejects(waiting, /gave up on the first event/);
  await assertNoPlaceLeft(queued, blocker);
});
