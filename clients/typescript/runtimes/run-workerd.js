// Runs the core test in workerd (Cloudflare Workers' runtime) through
// Miniflare: the bundled worker.js (build/worker.js, made by run.sh) with
// LATCHKEY_URL and LATCHKEY_API_KEY as its bindings, as two Workers: one
// with no compatibility flag (the core test without the edge-function
// examples of the book and the client's README, which read `process.env`)
// and one with `nodejs_compat` (all of it, the examples included, with
// `process.env` made from the bindings). One request to each runs the test.
// Then what becomes of a hold's renewal after the response: not renewed
// without `ctx.waitUntil` (its lease runs out), renewed while `waitUntil`
// keeps the request alive. Exits 0 when all of it passed, 1 otherwise.

import { readFileSync } from "node:fs";
import { Miniflare } from "miniflare";

const { version } = JSON.parse(readFileSync(new URL("node_modules/workerd/package.json", import.meta.url)));
const label = `workerd ${version}`;
const service = process.env.LATCHKEY_URL ?? "";
const apiKey = process.env.LATCHKEY_API_KEY;
const bindings = { LATCHKEY_URL: service };
if (apiKey) bindings.LATCHKEY_API_KEY = apiKey;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** The lock's state, read by this driver (Node), not by the Worker. */
async function lockState(name) {
  const response = await fetch(`${service}/locks/${encodeURIComponent(name)}`, {
    headers: apiKey ? { Authorization: `Bearer ${apiKey}` } : {},
  });
  if (response.status !== 200) throw new Error(`GET /locks/${name}: ${response.status}`);
  return response.json();
}

function check(condition, what) {
  if (!condition) throw new Error(what);
}

// The module listed by hand: Miniflare's own module walk refuses the
// client's `import(specifier)` in a variable (its owner label's `node:os`,
// reached only where there is a `process`, which a Worker has not).
const worker = {
  modules: [{ type: "ESModule", path: new URL("build/worker.js", import.meta.url).pathname }],
  compatibilityDate: "2025-07-18",
  bindings,
};
const mf = new Miniflare({
  workers: [
    { name: "plain", ...worker },
    { name: "nodejs-compat", ...worker, compatibilityFlags: ["nodejs_compat"] },
  ],
});
try {
  for (const [name, path] of [
    ["plain", "/?example=0"],
    ["nodejs-compat", "/"],
  ]) {
    const response = await (await mf.getWorker(name)).fetch(`http://worker.test${path}`);
    const body = await response.json();
    check(response.status === 200 && body.ok === true, `${name}: (${response.status}): ${body.error ?? JSON.stringify(body)}`);
    for (const step of body.steps) console.log(`${label} (${name}): ok: ${step}`);
  }

  // No waitUntil: once the response is sent, the hold's timers never run
  // again, so it is not renewed and its lease (600 ms) runs out.
  const plain = await mf.getWorker("plain");
  const bare = await (await plain.fetch("http://worker.test/after-response")).json();
  check(bare.fencingToken > 0, `after-response: ${JSON.stringify(bare)}`);
  await sleep(1500);
  const expired = await lockState(bare.name);
  check(expired.locked === false, `a hold with no waitUntil was still held 1500 ms after the response (lease 600 ms)`);
  console.log(`${label}: ok: after the response without waitUntil: not renewed, free once its 600 ms lease ran out`);

  // waitUntil(3000 ms, then release): renewed past its lease meanwhile.
  const kept = await (await plain.fetch("http://worker.test/after-response?wait-until=3000")).json();
  await sleep(1500);
  const renewed = await lockState(kept.name);
  check(renewed.locked === true, "a hold kept by waitUntil was not renewed past its 600 ms lease");
  check(renewed.fencing_token === kept.fencingToken, "the renewed hold's fencing token changed");
  let released = renewed;
  for (let i = 0; i < 50 && released.locked; i++) {
    await sleep(100);
    released = await lockState(kept.name);
  }
  check(released.locked === false, "the hold kept by waitUntil was not released when its waitUntil work did");
  console.log(`${label}: ok: after the response with waitUntil: renewed past its lease, released by the waitUntil work`);
  console.log(`${label}: passed`);
} catch (error) {
  console.error(`${label}: FAILED: ${error?.stack ?? error}`);
  process.exitCode = 1;
} finally {
  await mf.dispose();
}
