/// <reference lib="esnext.disposable" preserve="true" />
/**
 * Sessions: one TTL that holds of every primitive attach to. A session
 * renews itself in the background (and so every hold taken in it), tells
 * through an AbortSignal when it is lost, and its release (`close()`,
 * `await using`) releases every hold taken in it.
 */

import { SessionLostError, type LatchkeyError } from "./errors.js";
import { Lease, type BaseHold, type LeaseInit, type SessionLink } from "./hold.js";

export interface SessionOptions {
  /** The session's TTL (default: the service's default lease, 30000). Renewed in the background. */
  ttlMs?: number;
  /**
   * The session's owner label, in place of the client's; every hold taken
   * in the session without an `owner` of its own shows it.
   */
  owner?: string;
  /** Aborts the creation request. */
  signal?: AbortSignal;
}

/** `GET /sessions/{id}`. */
export interface SessionState {
  session: string;
  ttlMs: number;
  expiresInMs: number;
  /** The holds attached to it. */
  holds: number;
  owner: string | null;
}

/**
 * A session (`POST /sessions`): pass it as `session` to any acquire in
 * place of `leaseMs`. Its holds do not renew themselves: the session's
 * heartbeat (every `heartbeatIntervalMs`) renews them all. When the
 * session is lost, its `signal` aborts with a {@link SessionLostError} and
 * every hold taken in it through this object is lost too (their signals
 * abort with a `HoldLostError` of reason `"session-lost"`). `close()` (or
 * the end of an `await using` block) deletes it, which releases every
 * hold taken in it.
 */
export class Session extends Lease implements SessionLink {
  readonly #holds = new Set<BaseHold>();
  readonly #read: (id: string) => Promise<SessionState>;
  #closing: Promise<void> | undefined;

  /** @internal Use `Latchkey.session`. */
  constructor(init: LeaseInit, read: (id: string) => Promise<SessionState>) {
    super(init);
    this.#read = read;
  }

  /** The session id: a capability (whoever knows it can renew and delete it). Never log it. */
  get id(): string {
    return String(this.grant.session);
  }
  /** The session's TTL, as last renewed. */
  get ttlMs(): number {
    return this.leaseMs;
  }

  /** `GET /sessions/{id}`: its TTL, what is left of it, and how many holds it has. */
  state(): Promise<SessionState> {
    return this.#read(this.id);
  }

  /**
   * Stops the renewal and deletes the session, which releases every hold
   * taken in it (their objects become released). Safe to call more than
   * once. A 404 (the session was gone already) makes the session, and its
   * holds, lost, and still resolves.
   */
  close(): Promise<void> {
    return this.release();
  }

  override release(): Promise<void> {
    this.#closing ??= super.release().then(() => {
      if (this.lost) return;
      for (const hold of this.#holds) hold._sessionEnded();
      this.#holds.clear();
    });
    return this.#closing;
  }

  /** @internal A hold taken in this session. */
  _attach(hold: BaseHold): void {
    this.#holds.add(hold);
  }

  /** @internal A hold released by itself. */
  _detach(hold: BaseHold): void {
    this.#holds.delete(hold);
  }

  protected lostError(
    reason: "not-held" | "lease-expired" | "session-lost",
    _description: string,
    cause?: LatchkeyError,
  ): LatchkeyError {
    const expired = reason === "lease-expired";
    return new SessionLostError(
      expired
        ? "the session was lost: no heartbeat succeeded before its TTL ended"
        : "the session was lost: the service no longer has it (it expired or was deleted)",
      expired ? "lease-expired" : "not-held",
      cause ? { status: cause.status, problem: cause.problem } : {},
    );
  }
}
