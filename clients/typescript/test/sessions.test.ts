// Sessions: holds of several primitives in one session, renewed by it,
// released with it, lost with it.

import assert from "node:assert/strict";
import { test } from "node:test";
import { HoldLostError, NotAcquiredError, NotFoundError, SessionLostError, type Hold, type Session } from "latchkey";
import { aborted, answerDroppingProxy, client, raw, sleep, unique, within } from "./helpers.js";

test("holds of a lock and a semaphore in a session end with it at the end of an await using block", async () => {
  const lk = client();
  const other = client();
  const lockName = unique("s-lock");
  const semName = unique("s-sem");
  await lk.semaphore(semName).configure(3);
  let session!: Session;
  let lock!: Hold;
  let permits!: Hold;
  {
    await using s = await lk.session({ ttlMs: 5000 });
    session = s;
    assert.equal(s.ttlMs, 5000);
    assert.ok(s.heartbeatIntervalMs > 0 && s.heartbeatIntervalMs < 5000);
    lock = await lk.lock(lockName, { session: s });
    permits = await lk.semaphore(semName).acquire({ session: s, permits: 2 });
    assert.ok(lock.fencingToken > 0);
    assert.equal(permits.permits, 2);
    const state = await other.lockState(lockName);
    assert.equal(state.locked, true);
    assert.equal((await other.semaphore(semName).state()).available, 1);
    assert.equal((await s.state()).holds, 2);
    await assert.rejects(other.lock(lockName), NotAcquiredError);
  }
  assert.equal(session.released, true);
  assert.equal(lock.released, true);
  assert.equal(permits.released, true);
  assert.equal(lock.lost, false);
  assert.equal((await other.lockState(lockName)).locked, false);
  assert.equal((await other.semaphore(semName).state()).available, 3);
  await assert.rejects(session.state(), NotFoundError);
  await lock.release(); // already released with the session: nothing more
  await other.semaphore(semName).delete();
});

test("a session deleted from outside fires its signal and its holds'", async () => {
  const lk = client();
  const name = unique("s-lost");
  const session = await lk.session({ ttlMs: 1500 }); // heartbeat every 500 ms
  const hold = await lk.lock(name, { session });
  assert.equal(await raw("DELETE", `/sessions/${session.id}`), 200);
  await within(aborted(session.signal), 5000, "the session's signal");
  assert.equal(session.lost, true);
  assert.ok(session.signal.reason instanceof SessionLostError);
  assert.equal((session.signal.reason as SessionLostError).reason, "not-held");
  assert.equal(hold.lost, true);
  assert.ok(hold.signal.reason instanceof HoldLostError);
  assert.equal((hold.signal.reason as HoldLostError).reason, "session-lost");
  assert.throws(() => hold.throwIfLost(), HoldLostError);
  // The service released the lock with the session.
  assert.equal((await lk.lockState(name)).locked, false);
  await session.close(); // its 404 is ignored on a lost session
});

test("the session's renewal keeps a short TTL session, and its holds, past the TTL", async () => {
  const lk = client();
  const other = client();
  const name = unique("s-renew");
  const session = await lk.session({ ttlMs: 600 }); // heartbeat every 200 ms
  const hold = await lk.lock(name, { session });
  await sleep(2000); // more than 3 TTLs
  assert.equal(session.lost, false);
  assert.equal(hold.lost, false);
  assert.ok((await session.state()).expiresInMs > 0);
  await assert.rejects(other.lock(name), NotAcquiredError);
  await session.close();
  assert.equal(hold.released, true);
  assert.equal((await other.lockState(name)).locked, false);
});

test("a hold released by itself leaves the session, which goes on", async () => {
  const lk = client();
  const name = unique("s-own");
  await using session = await lk.session({ ttlMs: 5000 });
  const first = await lk.writeLock(name, { session: session.id }); // a session id works too
  await first.release();
  assert.equal((await lk.rwLockState(name)).mode, null);
  const again = await lk.readLock(name, { session });
  assert.equal((await lk.rwLockState(name)).readers, 1);
  assert.equal(again.lost, false);
});

test("leaseMs and session together are refused before anything is sent", async () => {
  const lk = client();
  await using session = await lk.session();
  await assert.rejects(lk.lock(unique("s-both"), { session, leaseMs: 1000 }), TypeError);
});

test(
  "holds taken in a session and released leave no listener on the session's signal",
  async () => {
    const { EventEmitter } = await import("node:events");
    const lk = client();
    const session = await lk.session({ ttlMs: 5000 });
    try {
      const before = EventEmitter.getEventListeners(session.signal, "abort").length;
      for (let i = 0; i < 12; i++) {
        const hold = await lk.lock(unique("s-listener"), { session });
        await hold.release();
      }
      // 12 listeners past Node's limit of 10 also print a
      // MaxListenersExceededWarning ("Possible EventTarget memory leak").
      assert.equal(EventEmitter.getEventListeners(session.signal, "abort").length, before);
    } finally {
      await session.close();
    }
  },
);

test(
  "a session closed whose DELETE answer was lost ends released, not lost, and so do its holds",
  async () => {
    const proxy = await answerDroppingProxy((method, path) => method === "DELETE" && path.startsWith("/sessions/"));
    try {
      const lk = client({ url: proxy.url });
      const name = unique("s-close-lost-answer");
      const session = await lk.session({ ttlMs: 5000 });
      const hold = await lk.lock(name, { session });
      await session.close(); // the service deleted it: the first DELETE was answered 200, unseen
      assert.equal((await client().lockState(name)).locked, false, "the service released the lock");
      assert.equal(session.lost, false, "a close that succeeded is no loss");
      assert.equal(session.signal.aborted, false);
      assert.equal(session.released, true);
      assert.equal(hold.lost, false);
      assert.equal(hold.released, true);
    } finally {
      proxy.close();
    }
  },
);

test(
  "a hold mixed in and out of a session is refused with an error of its own class",
  async () => {
    const lk = client();
    const name = unique("s-mismatch");
    const outside = await lk.lock(name, { holder: "mixed" });
    const session = await lk.session({ ttlMs: 5000 });
    try {
      await assert.rejects(lk.lock(name, { holder: "mixed", session }), (error: unknown) => {
        assert.ok(error instanceof Error);
        assert.equal(error.constructor.name, "SessionMismatchError");
        return true;
      });
    } finally {
      await session.close();
      await outside.release();
    }
  },
);
