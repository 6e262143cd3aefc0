// Runs the core test in Vercel's edge runtime (the `edge-runtime`
// package): evaluates the bundled edge.js (build/edge.js, made by run.sh)
// in an EdgeRuntime whose `process.env` has LATCHKEY_URL and
// LATCHKEY_API_KEY, dispatches one request to it and exits 0 when it
// answered 200 (the test passed), 1 otherwise.

import { readFileSync } from "node:fs";
import { EdgeRuntime } from "edge-runtime";

const { version } = JSON.parse(readFileSync(new URL("node_modules/edge-runtime/package.json", import.meta.url)));
const label = `edge-runtime ${version}`;
const env = { LATCHKEY_URL: process.env.LATCHKEY_URL, LATCHKEY_API_KEY: process.env.LATCHKEY_API_KEY };
const runtime = new EdgeRuntime({
  initialCode: readFileSync(new URL("build/edge.js", import.meta.url), "utf8"),
  extend: (context) => Object.assign(context, { process: { env } }),
});
const response = await runtime.dispatchFetch("http://edge.test/");
await response.waitUntil();
const body = await response.json();
if (response.status === 200 && body.ok === true) {
  for (const step of body.steps) console.log(`${label}: ok: ${step}`);
  console.log(`${label}: passed`);
} else {
  console.error(`${label}: FAILED (${response.status}): ${body.error ?? JSON.stringify(body)}`);
  process.exitCode = 1;
}
