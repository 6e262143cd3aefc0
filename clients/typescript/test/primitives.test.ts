// Every primitive: acquire, renew, state, release.

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  LatchExistsError,
  NotAcquiredError,
  NotFoundError,
  UpgradeWouldDeadlockError,
  type WaitingEvent,
} from "latchkey";
import { client, sleep, unique } from "./helpers.js";

test("fair lock: SSE waiters report their position and are served in order", async () => {
  const a = client();
  const b = client();
  const c = client();
  const name = unique("fair");
  const first = await a.fairLock(name, { leaseMs: 10000 });
  const bEvents: WaitingEvent[] = [];
  const cEvents: WaitingEvent[] = [];
  const order: string[] = [];
  const bWait = b.fairLock(name, { waitMs: 10000, leaseMs: 10000, onWaiting: (e) => bEvents.push(e) });
  bWait.then(() => order.push("b")).catch(() => {});
  while (bEvents.length === 0) await sleep(10);
  const cWait = c.fairLock(name, { waitMs: 10000, leaseMs: 10000, onWaiting: (e) => cEvents.push(e) });
  cWait.then(() => order.push("c")).catch(() => {});
  while (cEvents.length === 0) await sleep(10);
  assert.equal(bEvents[0]!.position, 0);
  assert.equal(cEvents[0]!.position, 1);
  assert.equal(typeof cEvents[0]!.retryAfterMs, "number");
  await first.release();
  const second = await bWait;
  assert.ok(second.fencingToken > first.fencingToken);
  await sleep(200);
  assert.deepEqual(order, ["b"], "c must wait behind b");
  await second.release();
  const third = await cWait;
  assert.ok(third.fencingToken > second.fencingToken);
  assert.deepEqual(order, ["b", "c"]);
  assert.ok(cEvents.some((e) => e.position === 0), "c moved to the head");
  await third.release();
  assert.equal((await a.fairLockState(name)).locked, false);
});

test("rwlock: readers share, a writer excludes, upgrade with other readers is refused", async () => {
  const a = client();
  const b = client();
  const name = unique("rw");
  const r1 = await a.readLock(name, { leaseMs: 5000 });
  const r2 = await b.readLock(name, { leaseMs: 5000 });
  assert.equal(r1.mode, "read");
  assert.equal(r1.readHoldCount, 1);
  const state = await a.rwLockState(name);
  assert.equal(state.mode, "read");
  assert.equal(state.readers, 2);
  // A refused try (it takes no place in the rwlock's queue), then the same
  // holder waits.
  const writerId = unique("writer");
  await assert.rejects(b.writeLock(name, { holder: writerId, waitMs: 0 }), NotAcquiredError);
  await assert.rejects(a.writeLock(name, { holder: r1.holder, waitMs: 0 }), UpgradeWouldDeadlockError);
  // A writer waiting while the readers leave.
  const t0 = performance.now();
  const writer = b.writeLock(name, { holder: writerId, waitMs: 5000, leaseMs: 900 });
  await sleep(100);
  await r1.release();
  await r2.release();
  const w = await writer;
  assert.ok(performance.now() - t0 < 1000, "the writer is granted as soon as the readers left");
  assert.equal(w.mode, "write");
  assert.ok(w.fencingToken > r2.fencingToken);
  await assert.rejects(a.readLock(name, { waitMs: 0 }), NotAcquiredError);
  await sleep(1500); // renewed past its lease
  assert.equal((await a.rwLockState(name)).mode, "write");
  await w.release();
  const after = await a.rwLockState(name);
  assert.equal(after.mode, null);
  assert.equal(after.readers, 0);
});

test("semaphore: permits are taken, refused, renewed and given back", async () => {
  const a = client();
  const b = client();
  const name = unique("sem");
  const sem = a.semaphore(name);
  await assert.rejects(sem.acquire({ waitMs: 0 }), NotFoundError);
  const configured = await sem.configure(3);
  assert.equal(configured.permits, 3);
  assert.equal(configured.available, 3);
  const two = await sem.acquire({ permits: 2, leaseMs: 600 });
  assert.equal(two.permits, 2);
  await assert.rejects(b.semaphore(name).acquire({ permits: 2, waitMs: 0 }), (error: unknown) => {
    assert.ok(error instanceof NotAcquiredError);
    assert.equal(error.slug, "no-permits");
    assert.equal(error.available, 1);
    return true;
  });
  const one = await b.semaphore(name).acquire({ leaseMs: 5000 });
  assert.equal(one.permits, 1);
  await sleep(1500); // the 2-permit hold lives on its heartbeats
  let state = await sem.state();
  assert.equal(state.available, 0);
  assert.equal(state.holders, 2);
  await two.release();
  await one.release();
  state = await sem.state();
  assert.equal(state.available, 3);
  assert.equal(await sem.delete(), true);
  await assert.rejects(sem.state(), NotFoundError);
});

test("latch: set, idempotent count-down, wait", async () => {
  const lk = client();
  const name = unique("latch");
  const latch = lk.latch(name);
  assert.deepEqual(await latch.set(2, { ttlMs: 60000 }), { name, count: 2, open: false });
  await assert.rejects(latch.set(2), LatchExistsError);
  assert.deepEqual(await latch.countDown({ idempotencyKey: `${name}-part-1` }), { count: 1, open: false });
  // The same key counts once: the first answer is replayed.
  assert.deepEqual(await latch.countDown({ idempotencyKey: `${name}-part-1` }), { count: 1, open: false });
  assert.deepEqual(await latch.state(), { name, count: 1, open: false });
  assert.deepEqual(await latch.wait({ waitMs: 0 }), { count: 1, open: false });
  const t0 = performance.now();
  assert.deepEqual(await latch.wait({ waitMs: 300 }), { count: 1, open: false });
  assert.ok(performance.now() - t0 >= 250);
  const waiting = latch.wait({ waitMs: 10000 });
  await sleep(200);
  assert.deepEqual(await latch.countDown(), { count: 0, open: true });
  assert.deepEqual(await waiting, { count: 0, open: true });
  await assert.rejects(latch.countDown(), NotFoundError);
  await latch.set(1);
  assert.equal(await latch.delete(), true);
  assert.equal((await latch.state()).open, true);
});

test("a count-down whose answer is lost is retried with the same key and counts once", async () => {
  let dropped = 0;
  const keys: string[] = [];
  const lk = client({
    fetch: async (input, init) => {
      const response = await fetch(input, init);
      if (input.endsWith("/count-down")) {
        keys.push(new Headers(init.headers).get("Idempotency-Key") ?? "");
        if (dropped === 0) {
          dropped++;
          await response.text();
          throw new TypeError("connection reset after the request was served");
        }
      }
      return response;
    },
  });
  const latch = lk.latch(unique("lostreply"));
  await latch.set(3);
  assert.deepEqual(await latch.countDown(), { count: 2, open: false });
  assert.equal(dropped, 1);
  assert.equal(keys.length, 2);
  assert.equal(keys[0], keys[1]);
  assert.ok(keys[0]!.length > 0);
  assert.equal((await latch.state()).count, 2);
  await latch.delete();
});

test("multi-lock: all or nothing, renewed, released together", async () => {
  const a = client();
  const b = client();
  const [x, y, z] = [unique("mx"), unique("my"), unique("mz")];
  const set = await a.multiLock([x, y], { leaseMs: 600 });
  assert.equal(set.kind, "multilock");
  assert.deepEqual(set.names, [x, y]);
  assert.ok(set.locks.every((lock) => lock.fencingToken > 0 && lock.holdCount === 1));
  await assert.rejects(b.lock(y, { waitMs: 0 }), NotAcquiredError);
  await assert.rejects(b.multiLock([y, z], { waitMs: 0 }), (error: unknown) => {
    assert.ok(error instanceof NotAcquiredError);
    assert.deepEqual(error.blockedBy, [y]);
    return true;
  });
  assert.equal((await b.lockState(z)).locked, false, "nothing of a refused set is taken");
  await sleep(1500);
  assert.equal(set.lost, false);
  assert.equal((await b.lockState(x)).locked, true);
  const waiter = b.multiLock([y, z], { waitMs: 5000 });
  await sleep(100);
  await set.release();
  const second = await waiter;
  assert.deepEqual(second.names, [y, z]);
  assert.equal((await a.lockState(x)).locked, false);
  await second.release();
  assert.equal((await a.lockState(y)).locked, false);
  assert.equal((await a.lockState(z)).locked, false);
});

test("redlock: granted by a quorum of nodes, renewed, released", async () => {
  const a = client();
  const b = client();
  const name = unique("redlock");
  const hold = await a.redlock(name, { leaseMs: 1000 });
  assert.equal(hold.kind, "redlock");
  assert.equal(hold.nodes?.total, 3);
  assert.ok((hold.nodes?.acquired ?? 0) >= 2);
  assert.ok((hold.validityMs ?? 0) > 0 && (hold.validityMs ?? 0) <= 1000);
  const token = hold.fencingToken;
  await assert.rejects(b.redlock(name, { waitMs: 0 }), NotAcquiredError);
  await sleep(2200);
  assert.equal(hold.lost, false);
  assert.equal(hold.fencingToken, token);
  assert.equal((await b.redlockState(name)).lockedOn, 3);
  await hold.release();
  const state = await b.redlockState(name);
  assert.equal(state.lockedOn, 0);
  assert.equal(state.nodes.length, 3);
  const again = await b.redlock(name, { leaseMs: 1000 });
  assert.ok(again.fencingToken > token);
  await again.release();
});

test("reentrant lock: the same holder re-enters with the same token", async () => {
  const lk = client();
  const name = unique("reentrant");
  const outer = await lk.lock(name, { leaseMs: 5000 });
  const inner = await lk.lock(name, { holder: outer.holder, leaseMs: 5000 });
  assert.equal(inner.holdCount, 2);
  assert.equal(inner.fencingToken, outer.fencingToken);
  await inner.release();
  assert.equal((await lk.lockState(name)).holdCount, 1);
  await outer.release();
  assert.equal((await lk.lockState(name)).locked, false);
});

test("owner labels: the default, the client's and an acquire's reach the state read", async () => {
  const os = await import("node:os");
  const path = await import("node:path");
  const expected = `${os.hostname()} pid ${process.pid} ${path.basename(process.argv[1] ?? "")}`;
  const name = unique("owner");
  const lk = client();
  const read = await lk.readLock(name);
  const state = await lk.rwLockState(name);
  assert.deepEqual(
    state.holds.map((h) => [h.owner, h.mode, h.session]),
    [[expected, "read", false]],
  );
  await read.release();
  // Control characters become spaces; at most 200 bytes, cut between characters.
  const labelled = client({ owner: "nightly\texport " + "é".repeat(150) });
  const write = await labelled.writeLock(name);
  assert.equal((await lk.rwLockState(name)).holds[0]!.owner, "nightly export " + "é".repeat(92));
  await write.release();
  const sem = unique("owner-sem");
  await lk.semaphore(sem).configure(2);
  const permits = await labelled.semaphore(sem).acquire({ permits: 2, owner: "job 7" });
  const semState = await lk.semaphore(sem).state();
  assert.deepEqual(semState.holds?.map((h) => [h.owner, h.permits]), [["job 7", 2]]);
  await permits.release();
  const unlabelled = await client({ owner: "" }).writeLock(name);
  assert.equal((await lk.rwLockState(name)).holds[0]!.owner, null);
  await unlabelled.release();
});
