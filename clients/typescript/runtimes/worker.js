// The core test's entry for workerd (Cloudflare Workers): a module Worker
// whose fetch handler runs the test and answers with the result, 200 when
// it passed and 500 with the error when not. Bundled into one file with
// esbuild by run.sh; run-workerd.js runs it in Miniflare and calls it.
// LATCHKEY_URL and LATCHKEY_API_KEY are the Worker's bindings (`env`).

import { runCore, settings } from "./core.js";

export default {
  async fetch(request, env) {
    try {
      return Response.json(await runCore(settings((name) => env[name], "workerd")));
    } catch (error) {
      return Response.json({ ok: false, error: String(error?.stack ?? error) }, { status: 500 });
    }
  },
};
