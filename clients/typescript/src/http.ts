/**
 * The HTTP layer: one request with a deadline and an optional caller's
 * signal, JSON and problem bodies, and a Server-Sent Events reader. Only
 * web-standard globals (fetch, AbortController, setTimeout, TextDecoder).
 */

import { errorFromProblem, LatchkeyError, NetworkError, type Problem } from "./errors.js";

/** The shape of `fetch` this client needs (the global one by default). */
export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

/** A monotonic clock in milliseconds. */
export function now(): number {
  const perf = (globalThis as { performance?: { now(): number } }).performance;
  return perf && typeof perf.now === "function" ? perf.now() : Date.now();
}

/** Resolves after `ms`, or rejects with the signal's reason when it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(0, ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** A `waitMs` option: a number >= 0 (default 0). */
export function checkWait(waitMs: number | undefined): number {
  const wait = waitMs ?? 0;
  if (typeof wait !== "number" || Number.isNaN(wait) || wait < 0) {
    throw new RangeError(`waitMs must be a number >= 0, got ${String(waitMs)}`);
  }
  return wait;
}

export function throwIfAborted(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw signal.reason;
}

export interface RequestSpec {
  method: "GET" | "POST" | "PUT" | "DELETE";
  /** Path with query, already encoded. */
  path: string;
  /** JSON body; omitted when undefined. */
  body?: unknown;
  headers?: Record<string, string>;
  /** The caller's signal: aborting it aborts the request with its reason. */
  signal?: AbortSignal | undefined;
  /** Client-side limit on the whole exchange (headers and body). */
  timeoutMs: number;
}

export interface JsonAnswer {
  status: number;
  headers: Headers;
  /** The parsed body (null when empty). */
  body: unknown;
}

/** A request in flight: its signal, and the cleanup of its timer. */
class Exchange {
  readonly controller = new AbortController();
  #timer: ReturnType<typeof setTimeout>;
  #outer: AbortSignal | undefined;
  #timedOut = false;
  #onAbort = () => this.controller.abort(this.#outer!.reason);

  constructor(signal: AbortSignal | undefined, timeoutMs: number) {
    this.#outer = signal;
    this.#timer = setTimeout(() => {
      this.#timedOut = true;
      this.controller.abort(new NetworkError(`no answer within ${Math.round(timeoutMs)} ms`));
    }, Math.max(1, timeoutMs));
    if (signal) {
      if (signal.aborted) this.controller.abort(signal.reason);
      else signal.addEventListener("abort", this.#onAbort, { once: true });
    }
  }

  /** What a failed fetch or body read becomes. */
  failure(error: unknown): unknown {
    if (this.#outer?.aborted) return this.#outer.reason;
    if (this.#timedOut) return this.controller.signal.reason;
    if (error instanceof LatchkeyError) return error;
    return new NetworkError(`request failed: ${describe(error)}`, { cause: error });
  }

  done(): void {
    clearTimeout(this.#timer);
    this.#outer?.removeEventListener("abort", this.#onAbort);
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}

/** Milliseconds from a `Retry-After` header given in seconds. */
export function retryAfterHeader(headers: Headers): number | undefined {
  const value = headers.get("retry-after");
  if (value === null) return undefined;
  const seconds = Number(value.trim());
  return Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : undefined;
}

/** The problem document of an error answer (a synthetic one for a non-problem body). */
export function problemOf(status: number, body: unknown, text: string): Problem {
  if (body && typeof body === "object" && typeof (body as Problem).type === "string") {
    return body as Problem;
  }
  return {
    type: "about:blank",
    title: `HTTP ${status}`,
    status,
    detail: text.slice(0, 200) || `HTTP ${status}`,
  };
}

/** The error for a non-success answer. */
export function errorOf(answer: JsonAnswer, text = ""): LatchkeyError {
  const problem = problemOf(answer.status, answer.body, text);
  return errorFromProblem(answer.status, problem, problem.retry_after_ms ?? retryAfterHeader(answer.headers));
}

export class Transport {
  readonly baseUrl: string;
  readonly #fetch: FetchLike;
  readonly #authorization: string | undefined;

  constructor(baseUrl: string, fetchImpl: FetchLike | undefined, apiKey?: string) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.#authorization = apiKey ? `Bearer ${apiKey}` : undefined;
    if (fetchImpl) {
      this.#fetch = fetchImpl;
    } else {
      // Called as a plain function, not as a method of this object, so that
      // runtimes which check fetch's receiver are satisfied.
      this.#fetch = (input, init) => globalThis.fetch(input, init);
    }
  }

  #init(spec: RequestSpec, accept: string, signal: AbortSignal): RequestInit {
    const headers: Record<string, string> = { Accept: accept, ...spec.headers };
    if (this.#authorization) headers.Authorization = this.#authorization;
    const init: RequestInit = { method: spec.method, headers, signal };
    if (spec.body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(spec.body);
    }
    return init;
  }

  /** One request; resolves with any HTTP answer (errors are the caller's to map). */
  async json(spec: RequestSpec): Promise<JsonAnswer & { text: string }> {
    const exchange = new Exchange(spec.signal, spec.timeoutMs);
    try {
      const response = await this.#fetch(this.baseUrl + spec.path, this.#init(spec, "application/json", exchange.controller.signal));
      const text = await response.text();
      let body: unknown = null;
      if (text.length > 0) {
        try {
          body = JSON.parse(text);
        } catch {
          body = null;
        }
      }
      return { status: response.status, headers: response.headers, body, text };
    } catch (error) {
      throw exchange.failure(error);
    } finally {
      exchange.done();
    }
  }

  /**
   * A request that asks for Server-Sent Events. Calls `onEvent` for every
   * event until it returns a value other than `undefined`, which is the
   * result; a JSON answer (the service answers errors, and may answer
   * anything, without a stream) goes to `onJson` instead.
   */
  async stream<T>(
    spec: RequestSpec,
    onEvent: (event: string, data: string) => T | undefined,
    onJson: (answer: JsonAnswer & { text: string }) => T,
  ): Promise<T> {
    const exchange = new Exchange(spec.signal, spec.timeoutMs);
    try {
      const response = await this.#fetch(
        this.baseUrl + spec.path,
        this.#init(spec, "text/event-stream", exchange.controller.signal),
      );
      const type = response.headers.get("content-type") ?? "";
      if (!type.toLowerCase().startsWith("text/event-stream") || response.body === null) {
        const text = await response.text();
        let body: unknown = null;
        try {
          body = text.length > 0 ? JSON.parse(text) : null;
        } catch {
          body = null;
        }
        return onJson({ status: response.status, headers: response.headers, body, text });
      }
      const reader = response.body.getReader();
      try {
        const result = await readEvents(reader, onEvent);
        if (result === undefined) {
          throw new NetworkError("the event stream ended without a final event");
        }
        return result;
      } finally {
        reader.cancel().catch(() => {});
      }
    } catch (error) {
      throw exchange.failure(error);
    } finally {
      exchange.done();
    }
  }
}

/**
 * Parses a `text/event-stream` body (the WHATWG format: `event:` and
 * `data:` fields, a blank line ends an event, `:` lines are comments such
 * as keep-alives) and hands each event to `onEvent` until it returns a
 * result.
 */
async function readEvents<T>(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  onEvent: (event: string, data: string) => T | undefined,
): Promise<T | undefined> {
  const decoder = new TextDecoder();
  let buffer = "";
  let eventName = "";
  let data: string[] = [];
  let sawData = false;
  for (;;) {
    const { value, done } = await reader.read();
    buffer += done ? decoder.decode() : decoder.decode(value, { stream: true });
    for (;;) {
      const match = /\r\n|\r|\n/.exec(buffer);
      if (match === null) break;
      // A lone "\r" at the end may be the first half of "\r\n": wait for more.
      if (match[0] === "\r" && match.index === buffer.length - 1 && !done) break;
      const line = buffer.slice(0, match.index);
      buffer = buffer.slice(match.index + match[0].length);
      if (line === "") {
        if (sawData) {
          const result = onEvent(eventName || "message", data.join("\n"));
          if (result !== undefined) return result;
        }
        eventName = "";
        data = [];
        sawData = false;
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let fieldValue = colon < 0 ? "" : line.slice(colon + 1);
      if (fieldValue.startsWith(" ")) fieldValue = fieldValue.slice(1);
      if (field === "event") eventName = fieldValue;
      else if (field === "data") {
        data.push(fieldValue);
        sawData = true;
      }
    }
    if (done) return undefined;
  }
}
