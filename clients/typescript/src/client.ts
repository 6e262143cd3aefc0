/**
 * The client: locks, state reads, semaphores and latches. Their
 * acquisitions (long-poll in pieces, or Server-Sent Events) are made by
 * the shared core (`core.ts`).
 */

import { Core, seg, type AcquireOptions, type AcquireSpec, type LatchkeyOptions } from "./core.js";
import { isRetryable, LatchkeyError } from "./errors.js";
import { BaseHold, Hold, MultiHold } from "./hold.js";
import { checkWait, errorOf, now, sleep, throwIfAborted } from "./http.js";
import { Named } from "./named.js";
import {
  acquireLimits,
  RateLimiter,
  type LimitPermits,
  type LimitRequest,
  type RateWaitOptions,
} from "./ratelimit.js";
import { Session, type SessionOptions, type SessionState } from "./session.js";

export interface SemaphoreAcquireOptions extends AcquireOptions {
  /** Permits to take (default 1). */
  permits?: number;
}

export interface LockState {
  name: string;
  locked: boolean;
  holdCount: number;
  ttlMs: number;
  /** The last token issued (0 if never locked). */
  fencingToken: number;
  /** Requests waiting on the instance that answered. */
  waiters: number;
}

/** One hold in a state read (never a holder id or session id). */
export interface HoldState {
  /** Its owner label, or null. */
  owner: string | null;
  expiresInMs: number;
  heldForMs: number;
  /** Taken in a session. */
  session: boolean;
  /** Reentrant holds (locks, rwlocks). */
  holdCount?: number;
  /** Rwlocks. */
  mode?: "read" | "write";
  /** Semaphores. */
  permits?: number;
}

export interface RwLockState {
  name: string;
  mode: "read" | "write" | null;
  readers: number;
  writerHoldCount: number;
  ttlMs: number;
  fencingToken: number;
  waiters: number;
  /** Waiters in the queue, on every instance. */
  queued: number;
  holds: HoldState[];
}

export interface RedlockNodeState {
  node: number;
  reachable: boolean;
  locked: boolean;
  ttlMs: number;
}

export interface RedlockState {
  name: string;
  lockedOn: number;
  total: number;
  nodes: RedlockNodeState[];
}

export interface SemaphoreState {
  name: string;
  permits: number;
  available: number;
  holders: number;
  waiters?: number;
  /** Waiters in the queue, on every instance. */
  queued?: number;
  holds?: HoldState[];
}

export interface LatchState {
  name: string;
  count: number;
  open: boolean;
}

export interface LatchCount {
  count: number;
  open: boolean;
}

/** The lock kinds that can be read and force-unlocked by name. */
export type LockKind = "lock" | "fair-lock" | "rwlock";

const LOCK_PREFIX: Record<LockKind, string> = {
  lock: "/locks",
  "fair-lock": "/fair-locks",
  rwlock: "/rwlocks",
};


/** A semaphore whose permits are leased (`/semaphores/{name}`). */
export class Semaphore extends Named {
  /** @internal Use {@link Latchkey.semaphore}. */
  constructor(core: Core, name: string) {
    super(core, "/semaphores", name);
  }

  /** Sets the number of permits (1..=1 000 000); live holds are never revoked. */
  configure(permits: number): Promise<SemaphoreState> {
    return this.core.call({ method: "PUT", path: this.path(), body: { permits } });
  }

  /** Takes `permits` (default 1) under one lease; rejects with `NotFoundError` if never configured. */
  acquire(options: SemaphoreAcquireOptions = {}): Promise<Hold> {
    const { permits, ...rest } = options;
    const core = this.core;
    return core.acquire(
      core.single("semaphore", "/semaphores", this.name, `${this.path()}/acquire`, {
        extra: permits === undefined ? {} : { permits },
        description: `semaphore ${JSON.stringify(this.name)}`,
      }),
      rest,
    );
  }

  /** `{name, permits, available, holders, waiters}`; `NotFoundError` if not configured. */
  state(): Promise<SemaphoreState> {
    return this.core.call({ method: "GET", path: this.path() });
  }

  /** Drops the configuration and every hold; resolves with whether it existed. */
  delete(): Promise<boolean> {
    return this.deleted();
  }
}

export interface CountDownOptions {
  /** How much to count down (default 1). */
  by?: number;
  /**
   * The `Idempotency-Key`: the same key on the same latch counts once
   * within 10 minutes. Default: a random key per call, so that this
   * client's own retry of the call counts once.
   */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

/** A count-down latch (`/latches/{name}`). */
export class Latch extends Named {
  /** @internal Use {@link Latchkey.latch}. */
  constructor(core: Core, name: string) {
    super(core, "/latches", name);
  }

  /** Sets the count (the latch must be open, else `LatchExistsError`); `ttlMs` bounds its life. */
  set(count: number, options: { ttlMs?: number } = {}): Promise<LatchState> {
    const body: Record<string, unknown> = { count };
    if (options.ttlMs !== undefined) body.ttl_ms = options.ttlMs;
    return this.core.call({ method: "PUT", path: this.path(), body });
  }

  /**
   * Counts down; `NotFoundError` when there is no closed latch. Sent with
   * an `Idempotency-Key`, and retried once with the same key when no
   * answer came (or the service was unavailable), so it counts once.
   */
  async countDown(options: CountDownOptions = {}): Promise<LatchCount> {
    const key = options.idempotencyKey ?? globalThis.crypto.randomUUID();
    const request = {
      method: "POST" as const,
      path: `${this.path()}/count-down`,
      body: options.by === undefined ? {} : { by: options.by },
      headers: { "Idempotency-Key": key },
      signal: options.signal,
    };
    try {
      return await this.core.call<LatchCount>(request);
    } catch (error) {
      if (!isRetryable(error) || options.signal?.aborted) throw error;
      await sleep(Math.min(error.retryAfterMs ?? 200, 1000), options.signal);
      return await this.core.call<LatchCount>(request);
    }
  }

  /**
   * Waits until the latch opens or `waitMs` passes (default 0: look once);
   * resolves with `{count, open}` either way. Longer than the service's
   * longest long-poll, it polls again.
   */
  async wait(options: { waitMs?: number; signal?: AbortSignal } = {}): Promise<LatchCount> {
    const core = this.core;
    const { signal } = options;
    throwIfAborted(signal);
    const deadline = now() + checkWait(options.waitMs);
    for (;;) {
      const piece = core.piece(deadline);
      let error: unknown;
      try {
        const state = await core.call<LatchCount>({
          method: "GET",
          path: `${this.path()}/wait?wait_ms=${piece}`,
          signal,
          timeoutMs: piece + core.requestTimeoutMs,
        });
        if (state.open || deadline - now() < 1) return state;
        continue;
      } catch (caught) {
        error = caught;
      }
      if (error instanceof LatchkeyError && core.learnMaxWait(error, piece)) continue;
      const rest = deadline - now();
      if (isRetryable(error) && rest >= 1 && !signal?.aborted) {
        await sleep(Math.min(error.retryAfterMs ?? 500, rest), signal);
        continue;
      }
      throw error;
    }
  }

  /** `{name, count, open}` (a missing latch is open, count 0). */
  state(): Promise<LatchState> {
    return this.core.call({ method: "GET", path: this.path() });
  }

  /** Deletes the latch (its waiters see it open); resolves with whether it was closed. */
  delete(): Promise<boolean> {
    return this.deleted();
  }
}

/**
 * Runs `fn(hold)` with a hold and releases it on every exit path. Rejects
 * with the `HoldLostError` if the hold was lost while `fn` ran (unless
 * `fn` itself threw: then `fn`'s error is what rejects).
 */
export async function withHold<H extends BaseHold, T>(
  acquire: Promise<H> | (() => Promise<H>),
  fn: (hold: H) => T | Promise<T>,
): Promise<T> {
  const hold = await (typeof acquire === "function" ? acquire() : acquire);
  let result: T;
  try {
    result = await fn(hold);
  } catch (error) {
    await hold.release().catch(() => {});
    throw error;
  }
  await hold.release();
  hold.throwIfLost();
  return result;
}

/** A latchkey client. Cheap to make; holds nothing until something is acquired. */
export class Latchkey {
  readonly #core: Core;

  constructor(options: LatchkeyOptions = {}) {
    this.#core = new Core(options);
  }

  /** The service's base URL. */
  get url(): string {
    return this.#core.transport.baseUrl;
  }

  /** A reentrant lock (`/locks/{name}`). */
  lock(name: string, options?: AcquireOptions): Promise<Hold> {
    return this.#lock("lock", name, options);
  }

  /** A fair lock (`/fair-locks/{name}`): granted in order of arrival; `onWaiting` reports `position`. */
  fairLock(name: string, options?: AcquireOptions): Promise<Hold> {
    return this.#lock("fair-lock", name, options);
  }

  /** A read hold of a read-write lock (`/rwlocks/{name}`). */
  readLock(name: string, options?: AcquireOptions): Promise<Hold> {
    return this.#rw("read", name, options);
  }

  /** A write hold of a read-write lock (`/rwlocks/{name}`). */
  writeLock(name: string, options?: AcquireOptions): Promise<Hold> {
    return this.#rw("write", name, options);
  }

  /** A RedLock over the service's independent Redis nodes (`/redlocks/{name}`). */
  redlock(name: string, options?: AcquireOptions): Promise<Hold> {
    const core = this.#core;
    return core.acquire(
      core.single("redlock", "/redlocks", name, `/redlocks/${seg(name)}/acquire`, {
        description: `redlock ${JSON.stringify(name)}`,
      }),
      options,
    );
  }

  /** A set of locks (the `/locks` objects), all or nothing (`/multilocks`). */
  multiLock(names: string[], options?: AcquireOptions): Promise<MultiHold> {
    const core = this.#core;
    const list = [...names];
    const spec: AcquireSpec<MultiHold> = {
      path: "/multilocks/acquire",
      extra: { names: list },
      description: `multi-lock ${JSON.stringify(list)}`,
      make: (init) => new MultiHold(init),
      ops: (holder) => ({
        heartbeat: { method: "POST", path: "/multilocks/heartbeat", body: { names: list, holder } },
        release: { method: "POST", path: "/multilocks/release", body: { names: list, holder } },
        releaseRest: (notHeld) => {
          const rest = list.filter((n) => !notHeld.includes(n));
          return rest.length > 0 && rest.length < list.length
            ? { method: "POST", path: "/multilocks/release", body: { names: rest, holder } }
            : undefined;
        },
      }),
      cleanup: (holder) => [{ method: "POST", path: "/multilocks/release", body: { names: list, holder } }],
    };
    return core.acquire(spec, options);
  }

  /** A semaphore; configure it, then acquire permits. */
  semaphore(name: string): Semaphore {
    return new Semaphore(this.#core, name);
  }

  /** A count-down latch. */
  latch(name: string): Latch {
    return new Latch(this.#core, name);
  }

  /** A rate limiter; configure it once, then acquire permits (per key or from its shared bucket). */
  rateLimiter(name: string): RateLimiter {
    return new RateLimiter(this.#core, name);
  }

  /**
   * Takes permits from several rate limits at once, all or none
   * (`POST /rate-limiters/acquire`): resolves with each limit's permits and
   * what is left, in the order given. Rejects with `RateLimitedError`
   * (`limit`: one that refused; `retryAfterMs`: when all of them admit),
   * `NotFoundError` (`limit`: the one not configured) or `OutOfRangeError`.
   */
  acquireLimits(
    limits: LimitRequest[],
    options?: Omit<RateWaitOptions, "idempotencyKey">,
  ): Promise<LimitPermits[]> {
    return acquireLimits(this.#core, limits, options);
  }

  /**
   * Creates a session (`POST /sessions`) that renews itself in the
   * background until closed or lost: pass it as `session` to any acquire.
   * `await using session = await lk.session({ ttlMs })` deletes it, and so
   * releases every hold taken in it, at the end of the block.
   */
  async session(options: SessionOptions = {}): Promise<Session> {
    const core = this.#core;
    const body: Record<string, unknown> = {};
    if (options.ttlMs !== undefined) body.ttl_ms = options.ttlMs;
    const owner = await core.ownerOf({ owner: options.owner });
    if (owner !== undefined) body.owner = owner;
    const sentAt = now();
    const answer = await core.transport.json({
      method: "POST",
      path: "/sessions",
      body,
      signal: options.signal,
      timeoutMs: core.requestTimeoutMs,
    });
    if (answer.status !== 201 || !answer.body || typeof answer.body !== "object") throw errorOf(answer, answer.text);
    const grant = answer.body as Record<string, unknown>;
    const path = `/sessions/${seg(String(grant.session))}`;
    return new Session(
      {
        transport: core.transport,
        ops: {
          heartbeat: { method: "POST", path: `${path}/heartbeat` },
          release: { method: "DELETE", path },
        },
        requestTimeoutMs: core.requestTimeoutMs,
        grant,
        since: sentAt,
        description: "session",
      },
      (id) => core.call<SessionState>({ method: "GET", path: `/sessions/${seg(id)}` }),
    );
  }

  /** `GET /locks/{name}` (never shows a holder id). */
  lockState(name: string): Promise<LockState> {
    return this.#core.call({ method: "GET", path: `/locks/${seg(name)}` });
  }

  /** `GET /fair-locks/{name}`. */
  fairLockState(name: string): Promise<LockState> {
    return this.#core.call({ method: "GET", path: `/fair-locks/${seg(name)}` });
  }

  /** `GET /rwlocks/{name}`. */
  rwLockState(name: string): Promise<RwLockState> {
    return this.#core.call({ method: "GET", path: `/rwlocks/${seg(name)}` });
  }

  /** `GET /redlocks/{name}`: the state on every node. */
  redlockState(name: string): Promise<RedlockState> {
    return this.#core.call({ method: "GET", path: `/redlocks/${seg(name)}` });
  }

  /**
   * Force unlock (`DELETE /locks/{name}`, `/fair-locks/{name}` or
   * `/rwlocks/{name}`): frees the object whoever holds it and wakes its
   * waiters; their holds are lost. Resolves with whether it was held.
   */
  async forceUnlock(name: string, kind: LockKind = "lock"): Promise<boolean> {
    const answer = await this.#core.call<{ released?: boolean }>({
      method: "DELETE",
      path: `${LOCK_PREFIX[kind]}/${seg(name)}`,
    });
    return answer?.released ?? false;
  }

  /** `withHold(() => this.lock(name, options), fn)`. */
  withLock<T>(name: string, fn: (hold: Hold) => T | Promise<T>, options?: AcquireOptions): Promise<T> {
    return withHold(() => this.lock(name, options), fn);
  }

  /** Runs `fn` with any hold: `lk.withHold(() => lk.fairLock("x"), async (hold) => ...)`. */
  withHold<H extends BaseHold, T>(acquire: Promise<H> | (() => Promise<H>), fn: (hold: H) => T | Promise<T>): Promise<T> {
    return withHold(acquire, fn);
  }

  #lock(kind: "lock" | "fair-lock", name: string, options?: AcquireOptions): Promise<Hold> {
    const core = this.#core;
    const prefix = LOCK_PREFIX[kind];
    return core.acquire(
      core.single(kind, prefix, name, `${prefix}/${seg(name)}/acquire`, {
        description: `${kind === "lock" ? "lock" : "fair lock"} ${JSON.stringify(name)}`,
      }),
      options,
    );
  }

  #rw(mode: "read" | "write", name: string, options?: AcquireOptions): Promise<Hold> {
    const core = this.#core;
    return core.acquire(
      core.single("rwlock", "/rwlocks", name, `/rwlocks/${seg(name)}/${mode}/acquire`, {
        mode,
        description: `${mode} hold of rwlock ${JSON.stringify(name)}`,
      }),
      options,
    );
  }
}
