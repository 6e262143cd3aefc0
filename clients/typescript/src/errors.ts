/**
 * Errors. Every error the client throws is a {@link LatchkeyError}; answers
 * of the service carry its RFC 9457 problem document (`problem`) and HTTP
 * `status`. The problem slugs are listed in the book's "Errors"
 * (docs/src/errors.md) and in the `ProblemType` schema of the OpenAPI
 * document.
 */

/** An `application/problem+json` document, as the service sends it. */
export interface Problem {
  /** `/problems/<slug>`. */
  type: string;
  title: string;
  status: number;
  detail: string;
  retry_after_ms?: number;
  field?: string;
  minimum?: number;
  maximum?: number;
  position?: number;
  available?: number;
  blocked_by?: string[];
  not_held?: string[];
  [member: string]: unknown;
}

export interface LatchkeyErrorOptions {
  status?: number;
  problem?: Problem;
  retryAfterMs?: number;
  cause?: unknown;
}

/** The base class of every error this client throws. */
export class LatchkeyError extends Error {
  /** The HTTP status, when the service answered. */
  readonly status: number | undefined;
  /** The problem document, when the service answered with one. */
  readonly problem: Problem | undefined;
  /** The slug of `problem.type` (`"lock-held"`, `"not-held"`, ...). */
  readonly slug: string | undefined;
  /** The service's hint of when to try again (`retry_after_ms`, else `Retry-After`). */
  readonly retryAfterMs: number | undefined;

  constructor(message: string, options: LatchkeyErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.status = options.status;
    this.problem = options.problem;
    this.slug = slugOf(options.problem);
    this.retryAfterMs = options.retryAfterMs ?? options.problem?.retry_after_ms;
  }
}

/**
 * Not acquired within the wait: 409 `lock-held` or `no-permits`, or the
 * SSE `timeout` event. `retryAfterMs` is the service's hint; `position`
 * (fair locks, semaphores), `available` (semaphores) and `blockedBy`
 * (multi-locks) are set when the service reports them.
 */
export class NotAcquiredError extends LatchkeyError {
  declare readonly retryAfterMs: number | undefined;
  readonly position: number | undefined;
  readonly available: number | undefined;
  readonly blockedBy: string[] | undefined;

  constructor(message: string, options: LatchkeyErrorOptions = {}) {
    super(message, options);
    this.position = options.problem?.position;
    this.available = options.problem?.available;
    this.blockedBy = options.problem?.blocked_by;
  }
}

/**
 * A hold was lost: a heartbeat was answered 404 `not-held` (force unlock,
 * expiry, deletion), or no heartbeat succeeded before the lease ended by
 * this client's clock, or (a hold taken in a `Session`) its session was
 * lost. It is the `reason` of the hold's aborted `signal`.
 */
export class HoldLostError extends LatchkeyError {
  /**
   * `"not-held"`: the service said so; `"lease-expired"`: no renewal in
   * time; `"session-lost"`: the session it was taken in was lost.
   */
  readonly reason: "not-held" | "lease-expired" | "session-lost";

  constructor(
    message: string,
    reason: "not-held" | "lease-expired" | "session-lost",
    options: LatchkeyErrorOptions = {},
  ) {
    super(message, options);
    this.reason = reason;
  }
}

/**
 * A session was lost: its heartbeat was answered 404 `not-held` (it
 * expired or was deleted), or no heartbeat succeeded before its TTL ended
 * by this client's clock. It is the `reason` of the session's aborted
 * `signal`; the holds taken in it are lost with it.
 */
export class SessionLostError extends LatchkeyError {
  /** `"not-held"`: the service said so; `"lease-expired"`: no renewal in time. */
  readonly reason: "not-held" | "lease-expired";

  constructor(message: string, reason: "not-held" | "lease-expired", options: LatchkeyErrorOptions = {}) {
    super(message, options);
    this.reason = reason;
  }
}

/** A rate limit's name and key (`null`: its shared bucket). */
export interface LimitRef {
  name: string;
  key: string | null;
}

/**
 * 429 `rate-limited` (or an SSE `timeout` of a rate limiter): the permits
 * come later than the wait. `retryAfterMs` is exactly when they will be
 * available; `available` what could be taken now; for several limits at
 * once, `limit` is one that refused.
 */
export class RateLimitedError extends LatchkeyError {
  declare readonly retryAfterMs: number | undefined;
  readonly available: number | undefined;
  readonly limit: LimitRef | undefined;

  constructor(message: string, options: LatchkeyErrorOptions = {}) {
    super(message, options);
    this.available = options.problem?.available;
    this.limit = limitOf(options.problem?.limit);
  }
}

/** The `limit` member of a problem (several limits at once). */
export function limitOf(value: unknown): LimitRef | undefined {
  if (!value || typeof value !== "object") return undefined;
  const { name, key } = value as { name?: unknown; key?: unknown };
  if (typeof name !== "string") return undefined;
  return { name, key: typeof key === "string" ? key : null };
}

/**
 * 404 `not-found`: no such semaphore (never configured, deleted), latch,
 * rate limiter or session. For several rate limits at once, `limit` names
 * the limiter that is not configured.
 */
export class NotFoundError extends LatchkeyError {
  readonly limit: LimitRef | undefined;

  constructor(message: string, options: LatchkeyErrorOptions = {}) {
    super(message, options);
    this.limit = limitOf(options.problem?.limit);
  }
}

/** 409 `latch-exists`: setting a latch that is still closed. */
export class LatchExistsError extends LatchkeyError {}

/** 409 `upgrade-would-deadlock`: a reader asked to write while other readers hold the rwlock. */
export class UpgradeWouldDeadlockError extends LatchkeyError {}

/**
 * 409 `session-mismatch`: the holder holds the object in another session,
 * or without one while this acquire names one (or the reverse); nothing
 * changed.
 */
export class SessionMismatchError extends LatchkeyError {}

/**
 * 400 `out-of-range`: `field` names the member, `minimum`/`maximum` the
 * accepted range when given; `limit` the rate limit whose burst a request
 * of several limits exceeds.
 */
export class OutOfRangeError extends LatchkeyError {
  readonly field: string | undefined;
  readonly minimum: number | undefined;
  readonly maximum: number | undefined;
  readonly limit: LimitRef | undefined;

  constructor(message: string, options: LatchkeyErrorOptions = {}) {
    super(message, options);
    this.field = options.problem?.field;
    this.minimum = options.problem?.minimum;
    this.maximum = options.problem?.maximum;
    this.limit = limitOf(options.problem?.limit);
  }
}

/**
 * The service cannot serve now and says to try again: 503
 * (`backend-unavailable`, `shutting-down`, `quorum-unavailable`), 429
 * (`too-many-waiters`), or a 502/504 from a proxy. Waits retry these
 * within their total wait by themselves.
 */
export class UnavailableError extends LatchkeyError {}

/** No answer: the connection failed, or the request timed out. */
export class NetworkError extends LatchkeyError {}

function slugOf(problem: Problem | undefined): string | undefined {
  const type = problem?.type;
  if (typeof type !== "string") return undefined;
  const at = type.lastIndexOf("/problems/");
  return at >= 0 ? type.slice(at + "/problems/".length) : type;
}

/** True for the answers a client should retry after a pause. */
export function isRetryable(error: unknown): error is LatchkeyError {
  if (error instanceof NetworkError) return true;
  return error instanceof UnavailableError;
}

/** The error for a problem answer of the service. */
export function errorFromProblem(status: number, problem: Problem, retryAfterMs: number | undefined): LatchkeyError {
  const options: LatchkeyErrorOptions = { status, problem, retryAfterMs };
  const slug = slugOf(problem);
  const message = `${status} ${slug ?? "error"}: ${problem.detail || problem.title || "request failed"}`;
  switch (slug) {
    case "lock-held":
    case "no-permits":
      return new NotAcquiredError(message, options);
    case "not-found":
      return new NotFoundError(message, options);
    case "rate-limited":
      return new RateLimitedError(message, options);
    case "latch-exists":
      return new LatchExistsError(message, options);
    case "upgrade-would-deadlock":
      return new UpgradeWouldDeadlockError(message, options);
    case "session-mismatch":
      return new SessionMismatchError(message, options);
    case "out-of-range":
      return new OutOfRangeError(message, options);
    case "redlock-not-configured":
      return new LatchkeyError(message, options);
  }
  if (status === 429 || status === 502 || status === 503 || status === 504) {
    return new UnavailableError(message, options);
  }
  return new LatchkeyError(message, options);
}
