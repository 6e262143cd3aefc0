// Shared by the test files: the service under test and small utilities.
// The tests run against a real latchkey; nothing is mocked.

import { randomUUID } from "node:crypto";
import { Latchkey, type LatchkeyOptions } from "latchkey";

const url = process.env.LATCHKEY_URL;
if (!url) {
  throw new Error(
    "LATCHKEY_URL is not set: these tests need a running latchkey " +
      "(e.g. scripts/dev.sh, then LATCHKEY_URL=http://127.0.0.1:8080 npm test)",
  );
}

export const URL_UNDER_TEST: string = url;

/** A client of the service under test. */
export function client(options: LatchkeyOptions = {}): Latchkey {
  return new Latchkey({ url: URL_UNDER_TEST, ...options });
}

/** A name no other test (or run) uses. */
export function unique(what: string): string {
  return `ts-${what}-${randomUUID().slice(0, 8)}`;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolves with `performance.now()` when the signal aborts. */
export function aborted(signal: AbortSignal): Promise<number> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve(performance.now());
    else signal.addEventListener("abort", () => resolve(performance.now()), { once: true });
  });
}

/** The service's longest long-poll, from its answer to a longer one. */
export async function serverMaxWaitMs(): Promise<number> {
  const response = await fetch(`${URL_UNDER_TEST}/locks/${unique("max")}/acquire`, {
    method: "POST",
    headers: {
      "Content-Type": "application/json",
      ...(process.env.LATCHKEY_API_KEY ? { Authorization: `Bearer ${process.env.LATCHKEY_API_KEY}` } : {}),
    },
    body: JSON.stringify({ wait_ms: 1_000_000_000 }),
  });
  const problem = (await response.json()) as { field?: string; maximum?: number };
  if (response.status !== 400 || problem.field !== "wait_ms") {
    throw new Error(`expected 400 out-of-range on wait_ms, got ${response.status}`);
  }
  return problem.maximum ?? 60_000;
}

/** A fetch that counts the requests whose path matches, for checking how a wait was split. */
export function countingFetch(pattern: RegExp): { fetch: typeof fetch; count: () => number } {
  let n = 0;
  return {
    fetch: (input, init) => {
      if (pattern.test(String(input))) n++;
      return fetch(input, init);
    },
    count: () => n,
  };
}
