// The core test's entry for the runtimes that run a script: Bun
// (`bun run cli.js`), Deno (`deno run --allow-net=HOST --allow-env=... cli.js`)
// and Node (`node cli.js`). Exit code 0 when it passed, 1 when not.

import { runCore, settings } from "./core.js";

const deno = globalThis.Deno;
const bun = globalThis.Bun;
const runtime = deno ? `deno ${deno.version.deno}` : bun ? `bun ${bun.version}` : `node ${process.versions.node}`;
const get = deno ? (name) => deno.env.get(name) : (name) => process.env[name];
const exit = deno ? (code) => deno.exit(code) : (code) => process.exit(code);

try {
  const result = await runCore(settings(get, runtime));
  for (const step of result.steps) console.log(`${runtime}: ok: ${step}`);
  console.log(`${runtime}: passed`);
} catch (error) {
  console.error(`${runtime}: FAILED: ${error?.stack ?? error}`);
  exit(1);
}
