// Holds: background renewal, loss, release on every exit path, mutual
// exclusion, `await using`.

import assert from "node:assert/strict";
import { test } from "node:test";
import { HoldLostError, NotAcquiredError } from "latchkey";
import { aborted, client, sleep, unique } from "./helpers.js";

test("a hold is renewed across several leases, token unchanged", async () => {
  const lk = client();
  const other = client();
  const name = unique("renew");
  const hold = await lk.lock(name, { leaseMs: 600 });
  assert.equal(hold.leaseMs, 600);
  assert.equal(hold.heartbeatIntervalMs, 200);
  const token = hold.fencingToken;
  assert.ok(token > 0);
  await sleep(2000); // more than 3 leases
  assert.equal(hold.lost, false);
  assert.equal(hold.signal.aborted, false);
  assert.equal(hold.fencingToken, token);
  const state = await other.lockState(name);
  assert.equal(state.locked, true);
  assert.equal(state.fencingToken, token);
  await assert.rejects(other.lock(name, { waitMs: 0 }), NotAcquiredError);
  await hold.release();
  assert.equal(hold.released, true);
  assert.equal((await other.lockState(name)).locked, false);
});

test("a force-unlocked hold fires its signal within a heartbeat interval", async () => {
  const lk = client();
  const admin = client();
  const name = unique("lost");
  const hold = await lk.lock(name, { leaseMs: 900 }); // heartbeat every 300 ms
  await sleep(100);
  const t0 = performance.now();
  assert.equal(await admin.forceUnlock(name), true);
  const at = await aborted(hold.signal);
  const took = at - t0;
  assert.ok(took <= hold.heartbeatIntervalMs + 250, `lost after ${took.toFixed(0)} ms`);
  assert.equal(hold.lost, true);
  assert.ok(hold.signal.reason instanceof HoldLostError);
  assert.equal((hold.signal.reason as HoldLostError).reason, "not-held");
  assert.throws(() => hold.throwIfLost(), HoldLostError);
  await hold.release(); // a 404 on a lost hold is ignored
});

test("withLock rejects with HoldLostError when the hold is lost during fn", async () => {
  const lk = client();
  const admin = client();
  const name = unique("withlost");
  let sawSignal = false;
  const run = lk.withLock(
    name,
    async (hold) => {
      setTimeout(() => void admin.forceUnlock(name), 150);
      await aborted(hold.signal);
      sawSignal = true;
      return "done";
    },
    { leaseMs: 900 },
  );
  await assert.rejects(run, (error: unknown) => {
    assert.ok(error instanceof HoldLostError);
    assert.equal(error.reason, "not-held");
    return true;
  });
  assert.ok(sawSignal);
});

test("a hold whose heartbeats cannot get through is lost when its lease ends", async () => {
  let cut = false;
  const lk = client({
    fetch: (input, init) =>
      cut && input.includes("/heartbeat") ? Promise.reject(new TypeError("network is down")) : fetch(input, init),
  });
  const name = unique("partition");
  const hold = await lk.lock(name, { leaseMs: 900 });
  await sleep(350); // one heartbeat gets through
  cut = true;
  const t0 = performance.now();
  const at = await aborted(hold.signal);
  // The lease is counted from the last renewal sent, at most one interval before the cut.
  assert.ok(at - t0 >= 400 && at - t0 <= 900 + 100, `lost after ${(at - t0).toFixed(0)} ms`);
  assert.equal((hold.signal.reason as HoldLostError).reason, "lease-expired");
  cut = false;
  await hold.release();
});

test("withLock releases when fn throws", async () => {
  const lk = client();
  const name = unique("throws");
  await assert.rejects(
    lk.withLock(name, async (hold) => {
      assert.equal((await lk.lockState(name)).locked, true);
      assert.ok(hold.fencingToken > 0);
      throw new Error("boom");
    }),
    /boom/,
  );
  assert.equal((await lk.lockState(name)).locked, false);
});

test("two clients never overlap on one lock and tokens increase", async () => {
  const name = unique("mutex");
  let inside = false;
  const tokens: number[] = [];
  const worker = async () => {
    const lk = client();
    for (let i = 0; i < 8; i++) {
      await lk.withLock(
        name,
        async (hold) => {
          assert.equal(inside, false, "two holders in the critical section");
          inside = true;
          tokens.push(hold.fencingToken);
          await sleep(15);
          inside = false;
        },
        { leaseMs: 5000, waitMs: 10000 },
      );
    }
  };
  await Promise.all([worker(), worker()]);
  assert.equal(tokens.length, 16);
  for (let i = 1; i < tokens.length; i++) {
    assert.ok(tokens[i]! > tokens[i - 1]!, `tokens ${tokens.join(",")}`);
  }
});

test("await using releases at the end of the block", async () => {
  const lk = client();
  const name = unique("using");
  {
    await using hold = await lk.lock(name, { leaseMs: 5000 });
    assert.equal((await lk.lockState(name)).locked, true);
    assert.ok(hold.fencingToken > 0);
  }
  assert.equal((await lk.lockState(name)).locked, false);

  const hold = await lk.fairLock(name, { leaseMs: 5000 });
  await hold[Symbol.asyncDispose]();
  assert.equal((await lk.fairLockState(name)).locked, false);
  assert.equal(hold.released, true);
});

test("release is idempotent and stops the renewal", async () => {
  let heartbeats = 0;
  const lk = client({
    fetch: (input, init) => {
      if (input.includes("/heartbeat")) heartbeats++;
      return fetch(input, init);
    },
  });
  const name = unique("idem");
  const hold = await lk.lock(name, { leaseMs: 600 });
  await Promise.all([hold.release(), hold.release()]);
  await hold.release();
  const before = heartbeats;
  await sleep(500);
  assert.equal(heartbeats, before);
  assert.equal(hold.lost, false);
});
