/**
 * latchkey: Redisson-style distributed locks, semaphores, latches, rate
 * limiters and sessions over HTTP. The service's routes and semantics are described in the
 * repository's book (docs/src/SUMMARY.md lists its chapters) and its OpenAPI document
 * (`/openapi.json`).
 *
 * ```ts
 * import { Latchkey } from "latchkey";
 * const lk = new Latchkey();
 * await using hold = await lk.lock("orders", { leaseMs: 30000, waitMs: 10000 });
 * await write(order, hold.fencingToken);
 * ```
 */

/// <reference lib="esnext.disposable" preserve="true" />

export {
  Latchkey,
  Latch,
  Semaphore,
  withHold,
  type CountDownOptions,
  type HoldState,
  type LatchCount,
  type LatchState,
  type LockKind,
  type LockState,
  type RedlockNodeState,
  type RedlockState,
  type RwLockState,
  type SemaphoreAcquireOptions,
  type SemaphoreState,
} from "./client.js";
export { type AcquireOptions, type LatchkeyOptions, type WaitingEvent } from "./core.js";
export { BaseHold, Hold, Lease, MultiHold, type HoldKind, type LockToken, type NodeCount } from "./hold.js";
export {
  RateLimiter,
  type LimitPermits,
  type LimitRequest,
  type RateAcquireOptions,
  type RateLimiterConfig,
  type RateLimiterState,
  type RatePermits,
  type RateWaitOptions,
} from "./ratelimit.js";
export { Session, type SessionOptions, type SessionState } from "./session.js";
export {
  HoldLostError,
  LatchExistsError,
  LatchkeyError,
  NetworkError,
  NotAcquiredError,
  NotFoundError,
  OutOfRangeError,
  RateLimitedError,
  SessionLostError,
  UnavailableError,
  UpgradeWouldDeadlockError,
  SessionMismatchError,
  type LatchkeyErrorOptions,
  type LimitRef,
  type Problem,
} from "./errors.js";
export type { FetchLike } from "./http.js";
