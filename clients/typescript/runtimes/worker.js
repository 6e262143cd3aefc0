// The core test's entry for workerd (Cloudflare Workers): a module Worker
// whose fetch handler runs the test and answers with the result, 200 when
// it passed and 500 with the error when not. Bundled into one file with
// esbuild by run.sh; run-workerd.js runs it in Miniflare and calls it.
// LATCHKEY_URL and LATCHKEY_API_KEY are the Worker's bindings (`env`), and
// with the `nodejs_compat` flag also `process.env`, where the edge-function
// examples (of the book and of the client's README) find them; `?example=0`
// leaves the examples out (a Worker without that flag).
//
// `/after-response` shows what happens to a hold's background renewal
// once the response is sent: it takes a lock (lease 600 ms) and answers at
// once, with `?wait-until=MS` keeping the request alive with
// `ctx.waitUntil` for MS ms before it releases the hold.

import { Latchkey } from "../dist/index.js";
import { runCore, settings } from "./core.js";

async function afterResponse(url, env, ctx) {
  const { url: service, apiKey } = settings((name) => env[name], "workerd");
  const lk = new Latchkey({ url: service, apiKey });
  const name = `rt-after-${crypto.randomUUID().slice(0, 8)}`;
  const hold = await lk.lock(name, { leaseMs: 600 });
  const keep = url.searchParams.get("wait-until");
  if (keep !== null) {
    ctx.waitUntil(new Promise((resolve) => setTimeout(resolve, Number(keep))).then(() => hold.release()));
  }
  return Response.json({ name, fencingToken: hold.fencingToken });
}

export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    try {
      if (url.pathname === "/after-response") return await afterResponse(url, env, ctx);
      const example = url.searchParams.get("example") !== "0";
      return Response.json(await runCore({ ...settings((name) => env[name], "workerd"), example }));
    } catch (error) {
      return Response.json({ ok: false, error: String(error?.stack ?? error) }, { status: 500 });
    }
  },
};
