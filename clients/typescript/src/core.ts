/**
 * What the client, its semaphores, latches and rate limiters share: the
 * client's options, its requests, and the polls of one acquisition.
 */

import {
  isRetryable,
  LatchkeyError,
  NetworkError,
  NotAcquiredError,
  OutOfRangeError,
  errorFromProblem,
  type Problem,
} from "./errors.js";
import { BaseHold, Hold, type Call, type HoldInit, type HoldKind, type HoldOps } from "./hold.js";
import {
  checkWait,
  errorOf,
  now,
  sleep,
  throwIfAborted,
  Transport,
  type FetchLike,
  type JsonAnswer,
  type RequestSpec,
} from "./http.js";
import { cleanOwner, defaultOwner } from "./owner.js";
import { Session } from "./session.js";

/** The longest single long-poll assumed when the service does not say (its default `max_wait_ms`). */
const DEFAULT_MAX_WAIT_MS = 60_000;

export interface LatchkeyOptions {
  /**
   * The service's base URL. Default: `LATCHKEY_URL` from the environment
   * where there is a `process` (Node, Bun), else `http://127.0.0.1:8080`.
   */
  url?: string;
  /**
   * The API key, for a service with API keys configured (sent as
   * `Authorization: Bearer <key>`). Default: `LATCHKEY_API_KEY` from the
   * environment where there is a `process`, else none.
   */
  apiKey?: string;
  /** A `fetch` to use instead of the global one. */
  fetch?: FetchLike;
  /**
   * How long a request may take beyond the wait it asks the service for
   * (default 10000). A heartbeat never waits beyond its lease's end.
   */
  requestTimeoutMs?: number;
  /**
   * The owner label every acquire sends (shown in state reads' `holds` and
   * refusals' `held_by`; not a secret). Default `"<host> pid <pid>
   * <program>"`; `""` sends none. Control characters become spaces; cut
   * to 200 bytes.
   */
  owner?: string;
}

/** A `waiting` event of an SSE acquisition. */
export interface WaitingEvent {
  /** When to expect a change (the blocker's remaining lease, capped on queued primitives). */
  retryAfterMs: number;
  /** Fair locks and semaphores: waiters ahead of this one. */
  position?: number;
  /** Semaphores: permits available. */
  available?: number;
  /** Multi-locks: the names held by others. */
  blockedBy?: string[];
}

export interface AcquireOptions {
  /**
   * The holder id. By default the service generates one for a single try
   * (`waitMs: 0`); for a wait the client generates one (from
   * `crypto.randomUUID()`), so that every poll of the wait is the same
   * waiter and keeps its queue place, and the wait can leave the queue
   * when it gives up.
   */
  holder?: string;
  /** The lease (default: the service's, 30000). Renewed in the background. Not with `session`. */
  leaseMs?: number;
  /**
   * Acquire in this session (a `Session`, or a session id) in place of a
   * lease: the hold lives as long as the session, which renews it (the
   * hold runs no renewal of its own) and whose end releases it. Given as
   * a `Session`, the hold is lost when the session is; given as an id,
   * the hold is not told (whoever has the `Session` is).
   */
  session?: Session | string;
  /** This acquire's owner label, in place of the client's (`LatchkeyOptions.owner`). */
  owner?: string;
  /**
   * The total wait (default 0: try once). Longer than the service's
   * longest long-poll (`max_wait_ms`), it is split into several polls as
   * the same holder. `Infinity` waits until granted (or aborted).
   */
  waitMs?: number;
  /**
   * Aborts the wait (rejecting with the signal's reason, after leaving
   * the queue of a fair lock, rwlock or semaphore).
   */
  signal?: AbortSignal;
  /**
   * Receive progress while waiting: the acquisition then asks for
   * Server-Sent Events. Exceptions it throws are ignored.
   */
  onWaiting?: (event: WaitingEvent) => void;
}

export function seg(value: string): string {
  return encodeURIComponent(value);
}

function camelKey(key: string): string {
  return key.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

/** snake_case JSON → camelCase, deeply. */
function camel<T>(value: unknown): T {
  if (Array.isArray(value)) return value.map((v) => camel(v)) as T;
  if (value && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[camelKey(k)] = camel(v);
    return out as T;
  }
  return value as T;
}

function newHolderId(): string {
  return globalThis.crypto.randomUUID().replace(/-/g, "");
}

/** A variable of the environment, where there is a `process` (Node, Bun). */
function env(name: string): string | undefined {
  try {
    const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
    const value = proc?.env?.[name];
    return value ? value : undefined;
  } catch {
    return undefined;
  }
}

type Outcome = { grant: Record<string, unknown> } | { error: LatchkeyError };

/** How to acquire one kind of hold. */
export interface AcquireSpec<H extends BaseHold> {
  path: string;
  /** Body members besides holder, lease_ms and wait_ms. */
  extra: Record<string, unknown>;
  make(init: HoldInit, holder: string): H;
  ops(holder: string): HoldOps;
  /**
   * Queued kinds (fair locks, rwlocks, semaphores): the call by which a
   * wait that gives up leaves its queue (the holder's release).
   */
  leave?: (holder: string) => Call;
  /**
   * The other kinds: calls that drop every hold of a holder this client
   * generated, after a lost answer.
   */
  cleanup?: (holder: string) => Call[];
  description: string;
}

/** @internal What the client, its semaphores and latches share. */
export class Core {
  readonly transport: Transport;
  readonly requestTimeoutMs: number;
  /** The service's longest long-poll, once learned from a 400 `out-of-range`. */
  maxWaitMs: number | undefined;

  constructor(options: LatchkeyOptions) {
    this.transport = new Transport(
      options.url ?? env("LATCHKEY_URL") ?? "http://127.0.0.1:8080",
      options.fetch,
      options.apiKey ?? env("LATCHKEY_API_KEY"),
    );
    this.requestTimeoutMs = options.requestTimeoutMs ?? 10_000;
    this.#owner = options.owner !== undefined ? Promise.resolve(cleanOwner(options.owner)) : undefined;
  }

  /** The client's owner label (computed once, at the first acquire). */
  #owner: Promise<string | undefined> | undefined;

  /** The label an acquire sends: its own, else the client's. */
  async ownerOf(options: AcquireOptions): Promise<string | undefined> {
    if (options.owner !== undefined) return cleanOwner(options.owner);
    this.#owner ??= defaultOwner().then(cleanOwner);
    return this.#owner;
  }

  /** A request whose 2xx answer is returned camelCased; anything else throws. */
  async call<T>(spec: Omit<RequestSpec, "timeoutMs"> & { timeoutMs?: number }): Promise<T> {
    const answer = await this.transport.json({ ...spec, timeoutMs: spec.timeoutMs ?? this.requestTimeoutMs });
    if (answer.status >= 200 && answer.status < 300) return camel<T>(answer.body);
    throw errorOf(answer, answer.text);
  }

  /** The next piece of a wait: what is left, at most the service's maximum. */
  piece(deadline: number): number {
    const left = Math.max(0, Math.floor(deadline - now()));
    const piece = Math.min(left, this.maxWaitMs ?? left);
    return Number.isFinite(piece) ? piece : DEFAULT_MAX_WAIT_MS;
  }

  /** After a 400 `out-of-range` on `wait_ms`: learns the maximum; false if nothing can be learned. */
  learnMaxWait(error: LatchkeyError, piece: number): boolean {
    if (!(error instanceof OutOfRangeError) || error.field !== "wait_ms" || piece <= 0) return false;
    const max = error.maximum ?? (piece > DEFAULT_MAX_WAIT_MS ? DEFAULT_MAX_WAIT_MS : Math.floor(piece / 2));
    if (!(max >= 0) || max >= piece) return false;
    this.maxWaitMs = max;
    return true;
  }

  async acquire<H extends BaseHold>(spec: AcquireSpec<H>, options: AcquireOptions = {}): Promise<H> {
    throwIfAborted(options.signal);
    const waitMs = checkWait(options.waitMs);
    const holder = options.holder ?? (waitMs > 0 ? newHolderId() : undefined);
    // A try takes no queue place; only the queued kinds keep one.
    if (holder === undefined || waitMs === 0 || spec.leave === undefined) {
      return this.wait(spec, options, waitMs, holder);
    }
    try {
      return await this.wait(spec, options, waitMs, holder);
    } catch (error) {
      // A wait that gives up (it runs out, is aborted, or fails) leaves its
      // queue at once: its place would otherwise hold up the waiters behind
      // it for the service's queue grace. The same request releases a
      // grant whose answer never arrived.
      await this.leave(spec.leave(holder));
      throw error;
    }
  }

  /** The polls of one wait, as `holder` (`undefined`: the service names one). */
  async wait<H extends BaseHold>(
    spec: AcquireSpec<H>,
    options: AcquireOptions,
    waitMs: number,
    holder: string | undefined,
  ): Promise<H> {
    const { signal, onWaiting } = options;
    const deadline = now() + waitMs;
    const generated = options.holder === undefined && holder !== undefined;
    const session = options.session;
    if (session !== undefined && options.leaseMs !== undefined) {
      throw new TypeError("pass either leaseMs or session: a hold in a session has the session's TTL as its lease");
    }
    // In a session, a hold without an owner of its own shows the session's.
    const owner = session !== undefined && options.owner === undefined ? undefined : await this.ownerOf(options);
    for (;;) {
      const piece = this.piece(deadline);
      const body: Record<string, unknown> = { ...spec.extra, wait_ms: piece };
      if (holder !== undefined) body.holder = holder;
      if (owner !== undefined) body.owner = owner;
      if (options.leaseMs !== undefined) body.lease_ms = options.leaseMs;
      if (session !== undefined) body.session = typeof session === "string" ? session : session.id;
      const sentAt = now();
      let outcome: Outcome;
      try {
        outcome = await this.poll(spec.path, body, piece, signal, onWaiting);
      } catch (error) {
        // No answer (network, timeout, abort): the service may have granted
        // it anyway. A holder generated here is ours alone: drop its holds
        // (the queued kinds leave instead, which does the same).
        if (generated && spec.cleanup) this.cleanup(spec.cleanup(holder!));
        throw error;
      }
      const receivedAt = now();
      if ("grant" in outcome) {
        const grant = outcome.grant;
        const grantHolder = typeof grant.holder === "string" ? grant.holder : holder;
        if (grantHolder === undefined) throw new LatchkeyError("the grant carries no holder id");
        const interval = typeof grant.heartbeat_interval_ms === "number" ? grant.heartbeat_interval_ms : 0;
        // The lease is counted from when the granting request was sent. After
        // a long wait that is no use (the grant came at some moment of it): count
        // from now, and renew at once so that it is counted from a known time.
        const slow = receivedAt - sentAt > interval;
        const init: HoldInit = {
          transport: this.transport,
          ops: spec.ops(grantHolder),
          requestTimeoutMs: this.requestTimeoutMs,
          grant,
          since: slow ? receivedAt : sentAt,
          description: spec.description,
          inSession: session !== undefined,
          session: session instanceof Session ? session : undefined,
        };
        const hold = spec.make(init, grantHolder);
        // A hold in a session is the session's to renew.
        if (!slow || session !== undefined) return hold;
        if ((await hold._renewNow()) !== "lost") return hold;
        // Lost before it could be used: wait on, if there is time.
        if (deadline - now() < 1) {
          throw new NotAcquiredError(`${spec.description} was granted but lost before it could be confirmed`);
        }
        continue;
      }
      const error = outcome.error;
      if (this.learnMaxWait(error, piece)) continue;
      const rest = deadline - now();
      if (error instanceof NotAcquiredError) {
        if (rest < 1) throw error;
        // The service answered before the piece was over (it should not):
        // pause rather than spin.
        if (receivedAt - sentAt < piece - 100) {
          await sleep(Math.min(error.retryAfterMs ?? 100, 1000, rest), signal);
        }
        continue;
      }
      if (isRetryable(error) && rest >= 1) {
        await sleep(Math.min(error.retryAfterMs ?? 1000, rest), signal);
        continue;
      }
      throw error;
    }
  }

  /** One acquire request: long-poll, or SSE when progress is wanted. */
  async poll(
    path: string,
    body: Record<string, unknown>,
    piece: number,
    signal: AbortSignal | undefined,
    onWaiting: ((event: WaitingEvent) => void) | undefined,
  ): Promise<Outcome> {
    const spec: RequestSpec = {
      method: "POST",
      path,
      body,
      signal,
      timeoutMs: piece + this.requestTimeoutMs,
    };
    const fromAnswer = (answer: JsonAnswer & { text: string }): Outcome => {
      if ((answer.status === 200 || answer.status === 201) && answer.body && typeof answer.body === "object") {
        return { grant: answer.body as Record<string, unknown> };
      }
      return { error: errorOf(answer, answer.text) };
    };
    if (!onWaiting) return fromAnswer(await this.transport.json(spec));
    return this.transport.stream<Outcome>(
      spec,
      (event, data) => {
        let parsed: unknown;
        try {
          parsed = JSON.parse(data);
        } catch {
          throw new NetworkError(`unreadable ${event} event from the service`);
        }
        switch (event) {
          case "waiting":
            try {
              onWaiting(camel<WaitingEvent>(parsed));
            } catch {
              // The caller's callback: its failures are not the wait's.
            }
            return undefined;
          case "acquired":
            return { grant: parsed as Record<string, unknown> };
          case "timeout":
          case "error": {
            const problem = parsed as Problem;
            const status = typeof problem.status === "number" ? problem.status : event === "timeout" ? 409 : 500;
            return { error: errorFromProblem(status, problem, problem.retry_after_ms) };
          }
          default:
            return undefined;
        }
      },
      fromAnswer,
    );
  }

  /**
   * Best effort: one request, within the request timeout; its answer (404
   * when nothing was left) and its failure change nothing.
   */
  async leave(call: Call): Promise<void> {
    try {
      await this.transport.json({ ...call, timeoutMs: this.requestTimeoutMs });
    } catch {
      // Nothing to do: the place lapses after the service's queue grace.
    }
  }

  /** Best effort, in the background. */
  cleanup(calls: Call[]): void {
    for (const call of calls) {
      this.transport.json({ ...call, timeoutMs: this.requestTimeoutMs }).catch(() => {});
    }
  }

  /** A hold on one object at `/{prefix}/{name}`. */
  single(
    kind: Exclude<HoldKind, "multilock">,
    prefix: string,
    name: string,
    acquirePath: string,
    options: { extra?: Record<string, unknown>; mode?: "read" | "write"; description: string },
  ): AcquireSpec<Hold> {
    const holderPath = (holder: string) => `${prefix}/${seg(name)}/holders/${seg(holder)}`;
    const releaseQuery = options.mode ? `?mode=${options.mode}` : "";
    const queued = kind === "fair-lock" || kind === "rwlock" || kind === "semaphore";
    return {
      path: acquirePath,
      extra: options.extra ?? {},
      description: options.description,
      make: (init) => new Hold(kind, init, options.mode),
      ops: (holder) => ({
        heartbeat: { method: "POST", path: `${holderPath(holder)}/heartbeat` },
        release: { method: "DELETE", path: holderPath(holder) + releaseQuery },
      }),
      leave: queued ? (holder) => ({ method: "DELETE", path: holderPath(holder) + releaseQuery }) : undefined,
      cleanup: queued
        ? undefined
        : (holder) => [{ method: "DELETE", path: holderPath(holder) + (kind === "lock" ? "?all=true" : "") }],
    };
  }
}
