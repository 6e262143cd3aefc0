/// <reference lib="esnext.disposable" preserve="true" />
/**
 * Holds: what an acquisition returns. A hold renews its lease in the
 * background until it is released or lost, and tells its owner through an
 * AbortSignal when it is lost. A hold taken in a session does not renew
 * itself: the session renews it, and its loss is the session's.
 */

import { HoldLostError, isRetryable, LatchkeyError, NetworkError } from "./errors.js";
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

/** @internal What a lease (a hold or a session) is made of. */
export interface LeaseInit {
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

/** @internal */
export interface HoldInit extends LeaseInit {
  /** Taken in a session: the hold does not renew itself. */
  inSession?: boolean;
  /** The session it was taken in, when given as a `Session` (its loss is the hold's). */
  session?: SessionLink | undefined;
}

/**
 * @internal What a hold needs of the session it was taken in: its loss
 * (the `signal`), and to be told of the hold so that the session's end
 * ends it.
 */
export interface SessionLink {
  readonly signal: AbortSignal;
  _attach(hold: BaseHold): void;
  _detach(hold: BaseHold): void;
}

type State = "held" | "releasing" | "released" | "lost";

/** The outcome of one heartbeat. */
export type Beat = "renewed" | "lost" | "retrying" | "stopped";

function num(value: unknown): number | undefined {
  return typeof value === "number" && Number.isFinite(value) ? value : undefined;
}

/**
 * What holds and sessions share: a lease renewed in the background by
 * heartbeats, lost on a 404 or when no renewal came in time (then its
 * `signal` aborts), and released once.
 */
export abstract class Lease implements AsyncDisposable {
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

  /** Whether this lease renews itself (a hold in a session does not). */
  readonly #renews: boolean;

  /** @internal Made by the client's acquire and session methods. */
  protected constructor(init: LeaseInit, renews = true) {
    this.#transport = init.transport;
    this.#ops = init.ops;
    this.#requestTimeoutMs = init.requestTimeoutMs;
    this.#description = init.description;
    this.#grant = init.grant;
    this.#renews = renews;
    this.#accept(init.grant, init.since);
  }

  /** The error a loss aborts the signal with. */
  protected abstract lostError(
    reason: "not-held" | "lease-expired" | "session-lost",
    description: string,
    cause?: LatchkeyError,
  ): LatchkeyError;

  /** @internal The latest grant (acquire or heartbeat answer), snake_case. */
  protected get grant(): Record<string, unknown> {
    return this.#grant;
  }

  /** The lease, as last granted (a session's: its TTL). */
  get leaseMs(): number {
    return remainingOf(this.#grant, "lease");
  }
  /** The remaining lease when the last grant or renewal was answered. */
  get expiresInMs(): number {
    return remainingOf(this.#grant, "expires");
  }
  /** How often it is renewed (a third of the lease). */
  get heartbeatIntervalMs(): number {
    return num(this.#grant.heartbeat_interval_ms) ?? Math.floor(this.leaseMs / 3);
  }

  /** Aborted, with a {@link HoldLostError} (a session: `SessionLostError`) as its reason, when it is lost. */
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

  /** @internal Ends it as released without a request (its session released it). */
  protected _ended(): void {
    if (this.#state !== "held") return;
    this.#stop();
    this.#state = "released";
    this.#releasing ??= Promise.resolve();
  }

  /** @internal Ends it as lost, with `reason` (its session was lost). */
  protected _lose(reason: "session-lost"): void {
    this.#lose(reason);
  }

  #accept(grant: Record<string, unknown>, sentAt: number): void {
    this.#grant = grant;
    const expires = remainingOf(grant, "expires");
    this.#deadline = sentAt + expires;
    if (!this.#renews) return;
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
    if (!this.#renews) return;
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

  #lose(reason: "not-held" | "lease-expired" | "session-lost", cause?: LatchkeyError): void {
    if (this.#state !== "held" && this.#state !== "releasing") return;
    this.#state = "lost";
    this.#stop();
    this.#controller.abort(this.lostError(reason, this.#description, cause));
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
    // Whether an earlier try may have released it though its answer was
    // lost: then a 404 is that release, not a loss.
    let maybeDone = false;
    for (let attempt = 1; ; attempt++) {
      let answer: JsonAnswer;
      try {
        answer = await this.#transport.json({ ...call, timeoutMs: this.#requestTimeoutMs });
      } catch (error) {
        maybeDone ||= error instanceof NetworkError;
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
        if (!wasLost && !maybeDone) this.#lose("not-held", error);
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

/** The remaining lease of a grant, a heartbeat's answer or a session's (`ttl_ms`). */
function remainingOf(grant: Record<string, unknown>, which: "lease" | "expires"): number {
  const lease = num(grant.lease_ms) ?? num(grant.ttl_ms) ?? 0;
  return which === "lease" ? lease : (num(grant.expires_in_ms) ?? lease);
}

/**
 * The grant fields every hold has, and its renewal, loss and release. A
 * hold taken in a session (given as a `Session`) is renewed by the
 * session, lost when it is lost, and released when it ends.
 */
export abstract class BaseHold extends Lease {
  readonly #session: SessionLink | undefined;
  /** Ends its listener on the session's signal once the hold is over. */
  readonly #unlisten = new AbortController();

  /** @internal Holds are made by the client's acquire methods. */
  protected constructor(init: HoldInit) {
    super(init, !init.inSession);
    this.#session = init.session;
    const session = init.session;
    if (session) {
      if (session.signal.aborted) this._lose("session-lost");
      else {
        session._attach(this);
        const signal = this.#unlisten.signal;
        session.signal.addEventListener("abort", () => this._lose("session-lost"), { once: true, signal });
      }
    }
  }

  /** The holder id: a capability (whoever knows it can renew and release). Never log it. */
  get holder(): string {
    return String(this.grant.holder);
  }

  override release(): Promise<void> {
    this.#session?._detach(this);
    this.#unlisten.abort();
    return super.release();
  }

  /** @internal Its session was released (with every hold in it). */
  _sessionEnded(): void {
    this.#unlisten.abort();
    this._ended();
  }

  protected lostError(
    reason: "not-held" | "lease-expired" | "session-lost",
    description: string,
    cause?: LatchkeyError,
  ): LatchkeyError {
    const why = {
      "not-held": "the service no longer has it (force unlock, expiry or deletion)",
      "lease-expired": "no renewal succeeded before its lease ended",
      "session-lost": "the session it was taken in was lost",
    }[reason];
    return new HoldLostError(
      `the hold on ${description} was lost: ${why}`,
      reason,
      cause ? { status: cause.status, problem: cause.problem } : {},
    );
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
