/**
 * Rate limiters (`/rate-limiters/{name}`): GCRA on the service's clock,
 * one shared bucket per limiter or one per key, and several limits taken
 * all or nothing (`POST /rate-limiters/acquire`). A wait is a reservation
 * on the service (long-poll); a refusal is a {@link RateLimitedError}.
 */

import { isRetryable, LatchkeyError, NetworkError, RateLimitedError } from "./errors.js";
import { checkWait, now, sleep, throwIfAborted } from "./http.js";
import type { Core } from "./core.js";
import { Named } from "./named.js";

/** `PUT /rate-limiters/{name}`: at most `rate` permits per `perMs`, at most `burst` (default `rate`) at once. */
export interface RateLimiterConfig {
  rate: number;
  perMs: number;
  burst?: number;
}

/** A limiter's configuration and the permits available now (in the shared bucket, or a key's). */
export interface RateLimiterState {
  name: string;
  rate: number;
  perMs: number;
  burst: number;
  available: number;
}

/** An admitted acquire: the permits taken, and what is left now. */
export interface RatePermits {
  permits: number;
  available: number;
}

/** An admitted limit of several taken at once. */
export interface LimitPermits extends RatePermits {
  name: string;
  /** The key, or `null` for the limiter's shared bucket. */
  key: string | null;
}

export interface RateWaitOptions {
  /**
   * The total wait (default 0: answer at once). The service reserves the
   * permits when they come within the wait and answers when they are due;
   * longer than its longest long-poll (`max_wait_ms`), the client polls
   * again when they are due within one.
   */
  waitMs?: number;
  /** Aborts the wait (the service gives back a reservation whose client went away). */
  signal?: AbortSignal;
  /**
   * The `Idempotency-Key`: an acquire sent again with the same key on the
   * same limiter counts once (10 minutes) and gets the first answer.
   */
  idempotencyKey?: string;
}

export interface RateAcquireOptions extends RateWaitOptions {
  /** Draw from this key's own bucket (1–256 bytes of UTF-8, no control characters); default the shared bucket. */
  key?: string;
  /** Permits to take (default 1, at most the limiter's burst). */
  permits?: number;
}

/** One limit of {@link Latchkey.acquireLimits}. */
export interface LimitRequest {
  /** The limiter's name. */
  name: string;
  /** Its key (default: its shared bucket). */
  key?: string;
  /** Permits to take from it (default 1). */
  permits?: number;
}

/**
 * Takes permits at `path` within the wait: polls of at most the service's
 * longest long-poll; after a refusal whose permits come within the wait
 * (but beyond this poll), sleeps until they come within the next one. A
 * poll whose answer was lost may have taken its permits: it is sent again
 * only with an `Idempotency-Key` (which makes the repeat count once);
 * without one (several limits) the loss is the caller's error.
 */
export async function takePermits<T>(
  core: Core,
  path: string,
  body: Record<string, unknown>,
  options: RateWaitOptions,
): Promise<T> {
  const { signal } = options;
  throwIfAborted(signal);
  const deadline = now() + checkWait(options.waitMs);
  const headers = options.idempotencyKey === undefined ? undefined : { "Idempotency-Key": options.idempotencyKey };
  for (;;) {
    const piece = core.piece(deadline);
    try {
      return await core.call<T>({
        method: "POST",
        path,
        body: { ...body, wait_ms: piece },
        headers,
        signal,
        timeoutMs: piece + core.requestTimeoutMs,
      });
    } catch (error) {
      if (signal?.aborted) throw error;
      if (error instanceof LatchkeyError && core.learnMaxWait(error, piece)) continue;
      const rest = deadline - now();
      if (error instanceof RateLimitedError) {
        const after = error.retryAfterMs;
        if (after === undefined || after > rest || piece >= rest) throw error;
        await sleep(Math.max(after - piece, 10), signal);
        continue;
      }
      const resendable = headers !== undefined || !(error instanceof NetworkError);
      if (isRetryable(error) && resendable && rest >= 1) {
        await sleep(Math.min(error.retryAfterMs ?? 1000, rest), signal);
        continue;
      }
      throw error;
    }
  }
}

/** A rate limiter (`/rate-limiters/{name}`). */
export class RateLimiter extends Named {
  /** @internal Use `Latchkey.rateLimiter`. */
  constructor(core: Core, name: string) {
    super(core, "/rate-limiters", name);
  }

  /** Sets the configuration (admin keys); a new limiter starts full, a changed one applies at once. */
  configure(config: RateLimiterConfig): Promise<RateLimiterState> {
    const body: Record<string, unknown> = { rate: config.rate, per_ms: config.perMs };
    if (config.burst !== undefined) body.burst = config.burst;
    return this.core.call({ method: "PUT", path: this.path(), body });
  }

  /** The configuration and what is available now, in the shared bucket or `key`'s; `NotFoundError` if not configured. */
  state(options: { key?: string } = {}): Promise<RateLimiterState> {
    const query = options.key === undefined ? "" : `?key=${encodeURIComponent(options.key)}`;
    return this.core.call({ method: "GET", path: this.path() + query });
  }

  /** Drops the limiter (its waiters end with 404); resolves with whether it existed. */
  delete(): Promise<boolean> {
    return this.deleted();
  }

  /**
   * Takes `permits` (default 1) from the shared bucket or `key`'s, within
   * `waitMs` (default 0). Rejects with {@link RateLimitedError}
   * (`retryAfterMs`: when they will be available) when they come later,
   * `NotFoundError` if never configured, `OutOfRangeError` beyond the burst.
   */
  acquire(options: RateAcquireOptions = {}): Promise<RatePermits> {
    const { key, permits, ...wait } = options;
    const body: Record<string, unknown> = {};
    if (key !== undefined) body.key = key;
    if (permits !== undefined) body.permits = permits;
    // Every poll of one acquire carries one key, so a poll sent again
    // after its answer was lost counts once (a refusal is not recorded
    // under it, so later polls still try afresh).
    const idempotencyKey = wait.idempotencyKey ?? globalThis.crypto.randomUUID();
    return takePermits(this.core, `${this.path()}/acquire`, body, { ...wait, idempotencyKey });
  }
}

/** `POST /rate-limiters/acquire`: every limit or none; the answers in the order given. */
export async function acquireLimits(
  core: Core,
  limits: LimitRequest[],
  options: Omit<RateWaitOptions, "idempotencyKey"> = {},
): Promise<LimitPermits[]> {
  const body = {
    limits: limits.map(({ name, key, permits }) => {
      const limit: Record<string, unknown> = { name };
      if (key !== undefined) limit.key = key;
      if (permits !== undefined) limit.permits = permits;
      return limit;
    }),
  };
  const answer = await takePermits<{ limits: LimitPermits[] }>(core, "/rate-limiters/acquire", body, options);
  return answer.limits.map((limit) => ({ ...limit, key: limit.key ?? null }));
}
