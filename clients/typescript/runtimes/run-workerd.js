// Runs the core test in workerd (Cloudflare Workers' runtime) through
// Miniflare: the bundled worker.js (build/worker.js, made by run.sh) with
// LATCHKEY_URL and LATCHKEY_API_KEY as its bindings; one request to it runs
// the test. Exits 0 when it answered 200 (the test passed), 1 otherwise.

import { readFileSync } from "node:fs";
import { Miniflare } from "miniflare";

const { version } = JSON.parse(readFileSync(new URL("node_modules/workerd/package.json", import.meta.url)));
const label = `workerd ${version}`;
const bindings = { LATCHKEY_URL: process.env.LATCHKEY_URL ?? "" };
if (process.env.LATCHKEY_API_KEY) bindings.LATCHKEY_API_KEY = process.env.LATCHKEY_API_KEY;
// The module listed by hand: Miniflare's own module walk refuses the
// client's `import(specifier)` in a variable (its owner label's `node:os`,
// reached only where there is a `process`, which a Worker has not).
const mf = new Miniflare({
  modules: [{ type: "ESModule", path: new URL("build/worker.js", import.meta.url).pathname }],
  compatibilityDate: "2025-07-18",
  bindings,
});
try {
  const response = await mf.dispatchFetch("http://worker.test/");
  const body = await response.json();
  if (response.status === 200 && body.ok === true) {
    for (const step of body.steps) console.log(`${label}: ok: ${step}`);
    console.log(`${label}: passed`);
  } else {
    console.error(`${label}: FAILED (${response.status}): ${body.error ?? JSON.stringify(body)}`);
    process.exitCode = 1;
  }
} finally {
  await mf.dispose();
}
