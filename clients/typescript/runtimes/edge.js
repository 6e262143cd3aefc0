// The core test's entry for Vercel's edge runtime: a fetch event listener
// (the edge runtime's own handler shape) that runs the test and answers
// with the result, 200 when it passed and 500 with the error when not.
// Bundled into one script with esbuild by run.sh; run-edge.js evaluates
// it in an EdgeRuntime and dispatches a request to it. LATCHKEY_URL and
// LATCHKEY_API_KEY come from `process.env`, as Vercel's edge functions
// have it.

import { runCore, settings } from "./core.js";

addEventListener("fetch", (event) => {
  event.respondWith(
    runCore(settings((name) => process.env[name], "edge-runtime")).then(
      (result) => Response.json(result),
      (error) => Response.json({ ok: false, error: String(error?.stack ?? error) }, { status: 500 }),
    ),
  );
});
