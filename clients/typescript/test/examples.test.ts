// The README's edge-function example, run as a runtime would call it.

import assert from "node:assert/strict";
import { test } from "node:test";
import handler from "../examples/edge-function.js";
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

test("the repository's README shows the example as it is tested", async () => {
  const { readFileSync } = await import("node:fs");
  const example = readFileSync(new URL("../../examples/edge-function.ts", import.meta.url), "utf8");
  const readme = readFileSync(new URL("../../../../README.md", import.meta.url), "utf8");
  assert.ok(readme.includes(example.trim()), "README.md embeds clients/typescript/examples/edge-function.ts verbatim");
});
