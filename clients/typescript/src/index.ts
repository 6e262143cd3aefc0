/**
 * latchkey: Redisson-style distributed locks, semaphores and latches over
 * HTTP. The service's routes and semantics are described in the
 * repository's README and its OpenAPI document (`/openapi.json`).
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
  type AcquireOptions,
  type CountDownOptions,
  type HoldState,
  type LatchCount,
  type LatchkeyOptions,
  type LatchState,
  type LockKind,
  type LockState,
  type RedlockNodeState,
  type RedlockState,
  type RwLockState,
  type SemaphoreAcquireOptions,
  type SemaphoreState,
  type WaitingEvent,
} from "./client.js";
export { BaseHold, Hold, MultiHold, type HoldKind, type LockToken, type NodeCount } from "./hold.js";
export {
  HoldLostError,
  LatchExistsError,
  LatchkeyError,
  NetworkError,
  NotAcquiredError,
  NotFoundError,
  OutOfRangeError,
  UnavailableError,
  UpgradeWouldDeadlockError,
  type LatchkeyErrorOptions,
  type Problem,
} from "./errors.js";
export type { FetchLike } from "./http.js";
