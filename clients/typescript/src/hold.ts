/// <reference lib="esnext.disposable" preserve="true" />
/**
 * Holds: what an acquisition returns. A hold renews its lease in the
 * background until it is released or lost, and tells its owner through an
 * AbortSignal when it is lost.
 */

import { HoldLostError, isRetryable, LatchkeyError } from "./errors.js";
import { errorOf, now, sleep, type JsonAnswer, type Transport } from "./http.js";

/** `Symbol.asyncDispose`, or the registered symbol polyfills use where it is not built in. */
export const asyncDispose: typeof Symbol.asyncDispose =
  (Symbol as { asyncDispose?: typeof Symbol.asyncDispose }).asyncDispose ??
  (Symbol.for("Symbol.asyncDispose") as typeof Symbol.asyncDispose);

/** What kind of object a hold is on. */
export type HoldKind = "lock" | "fair-lock" | "rwlock" | "semaphore" | "redlock" | "multilock";

/** One HTTP call a hold makes (heartbeat or release). */
export interface Call {
  method: "POST" | "DELETE";
  path: string;
  body?: unknown;
}

/** @internal How a hold talks to the service. */
export interface HoldOps {
  heartbeat: Call;
  release: Call;
  /** Multi-locks: the release of the locks of the set still held, after a 404 naming the others. */
  releaseRest?: (notHeld: string[]) => Call | undefined;
}

/** @internal */
export interface HoldInit {
  transport: Transport;
  ops: HoldOps;
  requestTimeoutMs: number;
  /** The grant, as the service sent it (snake_case JSON). */
  grant: Record<string, unknown>;
  /** When the lease is counted from, on the `now()` clock. */
  since: number;
  /** For messages: e.g. `lock "orders"` (never the holder id). */
  description: string;
}

type State = "held" | "releasing" | "released" | "lost";

/** The outcome of one heartbeat. */
export type Beat = "renewed" | "lost" | "retrying" | "stopped";

function num(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) ? value : undefined;
}

/** The grant fields every hold has, and its renewal, loss and release. */
export abstract class BaseHold implements AsyncDisposable {
  readonly #transport: Transport;
  readonly #ops: HoldOps;
  readonly #requestTimeoutMs: number;
  readonly #description: string;
  readonly #controller = new AbortController();
  #grant: Record<string, unknown>;
  #state: State = "held";
  /** When the lease ends by this client's clock (`now()`). */
  #deadline = 0;
  #beatTimer: ReturnType<typeof setTimeout> | undefined;
  #deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  #inflight: AbortController | undefined;
  #releasing: Promise<void> | undefined;

  /** @internal Holds are made by the client's acquire methods. */
  protected constructor(init: HoldInit) {
    this.#transport = init.transport;
    this.#ops = init.ops;
    this.#requestTimeoutMs = init.requestTimeoutMs;
    this.#description = init.description;
    this.#grant = init.grant;
    this.#accept(init.grant, init.since);
  }

  /** @internal The latest grant (acquire or heartbeat answer), snake_case. */
  protected get grant(): Record<string, unknown> {
    return this.#grant;
  }

  /** The holder id: a capability (whoever knows it can renew and release). Never log it. */
  get holder(): string {
    return String(this.#grant.holder);
  }
  /** The hold's lease, as last granted. */
  get leaseMs(): number {
    return num(this.#grant.lease_ms) ?? 0;
  }
  /** The remaining lease when the last grant or renewal was answered. */
  get expiresInMs(): number {
    return num(this.#grant.expires_in_ms) ?? this.leaseMs;
  }
  /** How often the hold is renewed (a third of the lease). */
  get heartbeatIntervalMs(): number {
    return num(this.#grant.heartbeat_interval_ms) ?? Math.floor(this.leaseMs / 3);
  }

  /** Aborted, with a {@link HoldLostError} as its reason, when the hold is lost. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }
  /** True once the hold is lost (see {@link signal}). */
  get lost(): boolean {
    return this.#state === "lost";
  }
  /** True once {@link release} has completed (and the hold was not lost). */
  get released(): boolean {
    return this.#state === "released";
  }
  /** Throws the {@link HoldLostError} if the hold was lost. */
  throwIfLost(): void {
    if (this.#state === "lost") throw this.#controller.signal.reason;
  }

  /**
   * Stops the renewal and releases the hold. Safe to call more than once
   * (later calls return the first call's promise). A hold that was lost
   * is still released (a 404 is ignored) in case the service still has
   * it. If the service answers that nothing was held although the hold
   * was not known to be lost, the hold becomes lost (its signal fires) and
   * the release still resolves.
   */
  release(): Promise<void> {
    this.#releasing ??= this.#release();
    return this.#releasing;
  }

  /** `await using hold = await lk.lock(...)` releases the hold at the end of the block. */
  [asyncDispose](): Promise<void> {
    return this.release();
  }

  /** @internal Renews now (used right after a long wait); resolves with the outcome. */
  _renewNow(): Promise<Beat> {
    clearTimeout(this.#beatTimer);
    return this.#beat();
  }

  #accept(grant: Record<string, unknown>, sentAt: number): void {
    this.#grant = grant;
    const expires = num(grant.expires_in_ms) ?? num(grant.lease_ms) ?? 0;
    this.#deadline = sentAt + expires;
    const interval = Math.min(num(grant.heartbeat_interval_ms) ?? expires / 3, expires / 2);
    clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = setTimeout(() => this.#lose("lease-expired"), Math.max(0, this.#deadline - now()));
    this.#schedule(sentAt + interval - now());
  }

  #schedule(delayMs: number): void {
    clearTimeout(this.#beatTimer);
    this.#beatTimer = setTimeout(() => void this.#beat(), Math.max(0, delayMs));
  }

  async #beat(): Promise<Beat> {
    if (this.#state !== "held") return "stopped";
    const sentAt = now();
    const budget = this.#deadline - sentAt;
    if (budget <= 0) {
      this.#lose("lease-expired");
      return "lost";
    }
    const inflight = new AbortController();
    this.#inflight = inflight;
    let answer: JsonAnswer;
    try {
      answer = await this.#transport.json({
        ...this.#ops.heartbeat,
        signal: inflight.signal,
        timeoutMs: Math.min(budget, this.#requestTimeoutMs),
      });
    } catch (error) {
      if (this.#state !== "held" || inflight.signal.aborted) return "stopped";
      this.#retry(error instanceof LatchkeyError ? error.retryAfterMs : undefined);
      return "retrying";
    } finally {
      if (this.#inflight === inflight) this.#inflight = undefined;
    }
    if (this.#state !== "held") return "stopped";
    if (answer.status === 200 && answer.body && typeof answer.body === "object") {
      this.#accept(answer.body as Record<string, unknown>, sentAt);
      return "renewed";
    }
    const error = errorOf(answer);
    if (answer.status === 404) {
      this.#lose("not-held", error);
      return "lost";
    }
    this.#retry(error.retryAfterMs);
    return "retrying";
  }

  /** After a failed heartbeat: try again sooner, at least once more before the lease ends. */
  #retry(retryAfterMs: number | undefined): void {
    const left = this.#deadline - now();
    const delay = Math.min(retryAfterMs ?? this.heartbeatIntervalMs / 3, left / 2);
    this.#schedule(Math.max(delay, 10));
  }

  #stop(): void {
    clearTimeout(this.#beatTimer);
    clearTimeout(this.#deadlineTimer);
    this.#beatTimer = undefined;
    this.#deadlineTimer = undefined;
    this.#inflight?.abort();
    this.#inflight = undefined;
  }

  #lose(reason: "not-held" | "lease-expired", cause?: LatchkeyError): void {
    if (this.#state !== "held" && this.#state !== "releasing") return;
    this.#state = "lost";
    this.#stop();
    const message =
      reason === "not-held"
        ? `the hold on ${this.#description} was lost: the service no longer has it (force unlock, expiry or deletion)`
        : `the hold on ${this.#description} was lost: no renewal succeeded before its lease ended`;
    this.#controller.abort(
      new HoldLostError(message, reason, cause ? { status: cause.status, problem: cause.problem } : {}),
    );
  }

  async #release(): Promise<void> {
    const wasLost = this.#state === "lost";
    this.#stop();
    if (!wasLost) this.#state = "releasing";
    try {
      await this.#send(this.#ops.release, wasLost);
    } catch (error) {
      if (!wasLost) throw error;
    } finally {
      if (this.#state === "releasing") this.#state = "released";
    }
  }

  async #send(call: Call, wasLost: boolean): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      let answer: JsonAnswer;
      try {
        answer = await this.#transport.json({ ...call, timeoutMs: this.#requestTimeoutMs });
      } catch (error) {
        if (attempt < 3 && isRetryable(error)) {
          await sleep(200 * attempt);
          continue;
        }
        throw error;
      }
      if (answer.status < 300) return;
      const error = errorOf(answer);
      if (answer.status === 404) {
        const notHeld = error.problem?.not_held;
        const rest = Array.isArray(notHeld) ? this.#ops.releaseRest?.(notHeld) : undefined;
        if (rest) await this.#send(rest, true).catch(() => {});
        if (!wasLost) this.#lose("not-held", error);
        return;
      }
      if (attempt < 3 && isRetryable(error)) {
        await sleep(Math.min(error.retryAfterMs ?? 200, 1000));
        continue;
      }
      throw error;
    }
  }
}

/** A multi-lock's lock, as granted. */
export interface LockToken {
  name: string;
  fencingToken: number;
  holdCount: number;
}

/** The node counts of a RedLock grant. */
export interface NodeCount {
  acquired: number;
  total: number;
}

/**
 * A hold on one object: a lock, fair lock, read or write hold of a rwlock,
 * a semaphore's permits, or a RedLock. Grant fields reflect the latest
 * grant or renewal.
 */
export class Hold extends BaseHold {
  readonly kind: Exclude<HoldKind, "multilock">;
  readonly #mode: "read" | "write" | undefined;

  /** @internal */
  constructor(kind: Exclude<HoldKind, "multilock">, init: HoldInit, mode?: "read" | "write") {
    super(init);
    this.kind = kind;
    this.#mode = mode;
  }

  /** The object's name. */
  get name(): string {
    return String(this.grant.name);
  }
  /**
   * The fencing token: strictly increasing per name; pass it to the
   * resource you protect so it can refuse a stale holder. (A JavaScript
   * number: exact up to 2^53.)
   */
  get fencingToken(): number {
    return num(this.grant.fencing_token) ?? 0;
  }
  /** Reentrant holds of this holder on the object (semaphores: its grants). */
  get holdCount(): number {
    return num(this.grant.hold_count) ?? 1;
  }
  /** rwlocks: the mode this hold was acquired in. */
  get mode(): "read" | "write" | undefined {
    return this.#mode;
  }
  /** rwlocks: the holder's read holds on the object. */
  get readHoldCount(): number | undefined {
    return num(this.grant.read_hold_count);
  }
  /** rwlocks: the holder's write holds on the object. */
  get writeHoldCount(): number | undefined {
    return num(this.grant.write_hold_count);
  }
  /** Semaphores: the holder's permits. */
  get permits(): number | undefined {
    return num(this.grant.permits);
  }
  /** RedLock: the validity left when the last grant or renewal was answered. */
  get validityMs(): number | undefined {
    return num(this.grant.validity_ms);
  }
  /** RedLock: how many nodes granted, of how many. */
  get nodes(): NodeCount | undefined {
    const nodes = this.grant.nodes as { acquired?: unknown; total?: unknown } | undefined;
    if (!nodes || typeof nodes !== "object") return undefined;
    return { acquired: num(nodes.acquired) ?? 0, total: num(nodes.total) ?? 0 };
  }
}

/** A multi-lock: a set of locks held together, renewed and released together. */
export class MultiHold extends BaseHold {
  readonly kind = "multilock" as const;

  /** @internal */
  constructor(init: HoldInit) {
    super(init);
  }

  /** The locks of the set, with each lock's fencing token. */
  get locks(): LockToken[] {
    const locks = Array.isArray(this.grant.locks) ? (this.grant.locks as Record<string, unknown>[]) : [];
    return locks.map((lock) => ({
      name: String(lock.name),
      fencingToken: num(lock.fencing_token) ?? 0,
      holdCount: num(lock.hold_count) ?? 1,
    }));
  }
  /** The names of the set. */
  get names(): string[] {
    return this.locks.map((lock) => lock.name);
  }
}
