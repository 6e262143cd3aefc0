// The book's edge-function example, run as a runtime would call it.

import assert from "node:assert/strict";
import { test } from "node:test";
import handler from "../examples/edge-function.js";
import limited, { PER_IP, SITE } from "../examples/rate-limit-edge.js";
import { client, unique } from "./helpers.js";

function order(orderId: string): Request {
  return new Request("http://edge.example/orders", { method: "POST", body: JSON.stringify({ orderId }) });
}

test("the edge-function example charges under the lock, and says busy while another holds it", async () => {
  const orderId = unique("order");
  const response = await handler.fetch(order(orderId));
  assert.equal(response.status, 200);
  const body = (await response.json()) as { receipt: string; fencingToken: number };
  assert.ok(body.fencingToken > 0);
  assert.equal(body.receipt, `charged ${orderId} with token ${body.fencingToken}`);

  const other = client();
  const hold = await other.lock(`order-${orderId}`, { leaseMs: 5_000 });
  try {
    const busy = await handler.fetch(order(orderId));
    assert.equal(busy.status, 409);
    assert.deepEqual(await busy.json(), { orderId, busy: true });
    assert.ok(Number(busy.headers.get("Retry-After")) >= 1);
  } finally {
    await hold.release();
  }
});

/** Whether the Markdown file at `readme` (relative to the package) embeds `examples/<example>` verbatim. */
async function embeds(readme: string, example: string): Promise<void> {
  const { readFileSync } = await import("node:fs");
  const code = readFileSync(new URL(`../../examples/${example}`, import.meta.url), "utf8");
  const text = readFileSync(new URL(`../../${readme}`, import.meta.url), "utf8");
  assert.ok(text.includes(code.trim()), `${readme} embeds clients/typescript/examples/${example} verbatim`);
}

test("the book shows the example as it is tested", () => embeds("../../docs/src/client-tools.md", "edge-function.ts"));

function visit(ip: string): Promise<Response> {
  return limited.fetch(new Request("http://edge.example/", { headers: { "x-forwarded-for": `${ip}, 10.0.0.1` } }));
}

test("the rate-limit edge-function example limits per IP and globally with one call", async () => {
  const lk = client();
  const perIp = lk.rateLimiter(PER_IP);
  const site = lk.rateLimiter(SITE);
  // Fresh limiters under the example's names: 2 a minute per IP, 3 a minute in all.
  await perIp.delete().catch(() => false);
  await site.delete().catch(() => false);
  await perIp.configure({ rate: 2, perMs: 60_000 });
  await site.configure({ rate: 3, perMs: 60_000 });
  try {
    // What an IP has taken stays taken across a DELETE and a new PUT of the
    // limiter, so each run takes fresh addresses: 32 random bits of the
    // IPv6 documentation prefix (a random octet of 200 once collided).
    const run = crypto.randomUUID();
    const net = `2001:db8:${run.slice(0, 4)}:${run.slice(4, 8)}`;
    const [a, b, c] = [`${net}::a`, `${net}::b`, `${net}::c`];
    for (let i = 0; i < 2; i++) {
      const ok = await visit(a);
      assert.equal(ok.status, 200);
      assert.equal(await ok.text(), `hello, ${a}\n`);
    }
    const perIpRefusal = await visit(a);
    assert.equal(perIpRefusal.status, 429);
    assert.deepEqual(await perIpRefusal.json(), { error: "too many requests", limit: PER_IP });
    assert.ok(Number(perIpRefusal.headers.get("Retry-After")) >= 1);
    // The refused request took nothing from the site's limit.
    assert.equal((await site.state()).available, 1);
    assert.equal((await visit(b)).status, 200);
    const siteRefusal = await visit(c);
    assert.equal(siteRefusal.status, 429);
    assert.deepEqual(await siteRefusal.json(), { error: "too many requests", limit: SITE });
    assert.equal((await perIp.state({ key: c })).available, 2);
  } finally {
    await perIp.delete();
    await site.delete();
  }
});

test("the client's README shows the rate-limit example as it is tested", () => embeds("README.md", "rate-limit-edge.ts"));
