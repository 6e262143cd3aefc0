// Shared by the test files: the service under test and small utilities.
// The tests run against a real latchkey; nothing is mocked.

import { randomUUID } from "node:crypto";
import { Latchkey, type AcquireOptions, type Hold, type LatchkeyOptions } from "latchkey";

const url = process.env.LATCHKEY_URL;
if (!url) {
  throw new Error(
    "LATCHKEY_URL is not set: these tests need a running latchkey " +
      "(e.g. scripts/dev.sh, then LATCHKEY_URL=http://127.0.0.1:8080 npm test)",
  );
}

export const URL_UNDER_TEST: string = url;

/** A client of the service under test. */
export function client(options: LatchkeyOptions = {}): Latchkey {
  return new Latchkey({ url: URL_UNDER_TEST, ...options });
}

/** A name no other test (or run) uses. */
export function unique(what: string): string {
  return `ts-${what}-${randomUUID().slice(0, 8)}`;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolves with `performance.now()` when the signal aborts. */
export function aborted(signal: AbortSignal): Promise<number> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve(performance.now());
    else signal.addEventListener("abort", () => resolve(performance.now()), { once: true });
  });
}

/** The service's longest long-poll, from its answer to a longer one. */
export async function serverMaxWaitMs(): Promise<number> {
  const response = await fetch(`${URL_UNDER_TEST}/locks/${unique("max")}/acquire`, {
    method: "POST",
    headers: {
      "Content-Type": "application/json",
      ...(process.env.LATCHKEY_API_KEY ? { Authorization: `Bearer ${process.env.LATCHKEY_API_KEY}` } : {}),
    },
    body: JSON.stringify({ wait_ms: 1_000_000_000 }),
  });
  const problem = (await response.json()) as { field?: string; maximum?: number };
  if (response.status !== 400 || problem.field !== "wait_ms") {
    throw new Error(`expected 400 out-of-range on wait_ms, got ${response.status}`);
  }
  return problem.maximum ?? 60_000;
}

/** A fetch that counts the requests whose path matches, for checking how a wait was split. */
export function countingFetch(pattern: RegExp): { fetch: typeof fetch; count: () => number } {
  let n = 0;
  return {
    fetch: (input, init) => {
      if (pattern.test(String(input))) n++;
      return fetch(input, init);
    },
    count: () => n,
  };
}

/** The queued primitives, for the tests of a wait that gives up. */
export const QUEUED_KINDS = ["fair-lock", "write-lock", "read-lock", "semaphore"] as const;
export type QueuedKind = (typeof QUEUED_KINDS)[number];

/**
 * One queued primitive (a fair lock, either side of a read-write lock, a
 * semaphore of one permit) blocked by a holder: a waiter's acquisition,
 * and the try that must be granted once the blocker released if the
 * waiter that gave up left no place behind.
 */
export class Queued {
  readonly name: string;

  constructor(
    readonly kind: QueuedKind,
    readonly lk: Latchkey,
  ) {
    this.name = unique(`leave-${kind}`);
  }

  /** Takes the blocking hold (configuring the semaphore first). */
  async block(): Promise<Hold> {
    if (this.kind === "semaphore") await this.lk.semaphore(this.name).configure(1);
    return this.#side(this.lk, true, { leaseMs: 30000 });
  }

  waiter(lk: Latchkey, options: AcquireOptions): Promise<Hold> {
    return this.#side(lk, false, options);
  }

  /** A try (`waitMs` 0); on an rwlock a write, refused while anyone is queued ahead. */
  attempt(): Promise<Hold> {
    if (this.kind === "semaphore" || this.kind === "fair-lock") return this.#side(this.lk, false, {});
    return this.lk.writeLock(this.name);
  }

  async waiters(): Promise<number> {
    if (this.kind === "fair-lock") return (await this.lk.fairLockState(this.name)).waiters;
    if (this.kind === "semaphore") return (await this.lk.semaphore(this.name).state()).waiters ?? 0;
    return (await this.lk.rwLockState(this.name)).waiters;
  }

  /** Until one waiter waits. */
  async untilWaiting(): Promise<void> {
    const deadline = performance.now() + 5000;
    while ((await this.waiters()) !== 1) {
      if (performance.now() > deadline) throw new Error(`${this.kind}: the waiter never waited`);
      await sleep(20);
    }
  }

  #side(lk: Latchkey, blocker: boolean, options: AcquireOptions): Promise<Hold> {
    if (this.kind === "fair-lock") return lk.fairLock(this.name, options);
    if (this.kind === "semaphore") return lk.semaphore(this.name).acquire({ ...options, permits: 1 });
    // A writer waits behind a reader, a reader behind a writer.
    const write = (this.kind === "write-lock") !== blocker;
    return write ? lk.writeLock(this.name, options) : lk.readLock(this.name, options);
  }
}

/** A request of the service's HTTP API straight (as another program would send it); resolves with the status. */
export async function raw(method: string, path: string): Promise<number> {
  const response = await fetch(`${URL_UNDER_TEST}${path}`, {
    method,
    headers: process.env.LATCHKEY_API_KEY ? { Authorization: `Bearer ${process.env.LATCHKEY_API_KEY}` } : {},
  });
  await response.body?.cancel();
  return response.status;
}

/** Rejects when `promise` has not settled within `ms` (a test that would hang fails instead). */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * A proxy to the service under test that forwards every request but drops
 * the answer to the first one that `drop(method, path)` picks: the service
 * acts on it, the client sees its connection closed.
 */
export async function answerDroppingProxy(
  drop: (method: string, path: string) => boolean,
): Promise<{ url: string; close: () => void }> {
  const { createServer } = await import("node:http");
  let dropped = false;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      void (async () => {
        const headers: Record<string, string> = {};
        for (const [name, value] of Object.entries(req.headers)) {
          if (typeof value === "string" && !["host", "connection", "content-length"].includes(name)) headers[name] = value;
        }
        const body = chunks.length > 0 ? Buffer.concat(chunks) : undefined;
        const answer = await fetch(URL_UNDER_TEST + req.url, { method: req.method, headers, body });
        const text = await answer.text();
        if (!dropped && drop(req.method ?? "", req.url ?? "")) {
          dropped = true;
          req.socket.destroy();
          return;
        }
        res.writeHead(answer.status, { "content-type": answer.headers.get("content-type") ?? "application/json" });
        res.end(text);
      })();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  return { url: `http://127.0.0.1:${address.port}`, close: () => server.close() };
}
