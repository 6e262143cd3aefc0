// A serverless / edge function (the `fetch` handler shape of Cloudflare
// Workers, Deno Deploy, Bun and Vercel's edge runtime): one request per
// order at a time, renewed while it works, told to stop if the lock is lost.
import { Latchkey, NotAcquiredError } from "latchkey";

const lk = new Latchkey(); // LATCHKEY_URL and LATCHKEY_API_KEY from the environment

export default {
  async fetch(request: Request): Promise<Response> {
    const { orderId } = (await request.json()) as { orderId: string };
    try {
      return await lk.withLock(
        `order-${orderId}`,
        async (hold) => {
          // Pass the token to what you write, and stop when hold.signal aborts.
          const receipt = await chargeOrder(orderId, hold.fencingToken, hold.signal);
          return Response.json({ orderId, receipt, fencingToken: hold.fencingToken });
        },
        { leaseMs: 15_000, waitMs: 2_000 },
      );
    } catch (error) {
      if (error instanceof NotAcquiredError) {
        const seconds = Math.max(1, Math.ceil((error.retryAfterMs ?? 1000) / 1000));
        return Response.json({ orderId, busy: true }, { status: 409, headers: { "Retry-After": String(seconds) } });
      }
      throw error;
    }
  },
};

/** Your work; here it only waits a little, as a payment call would. */
async function chargeOrder(orderId: string, fencingToken: number, signal: AbortSignal): Promise<string> {
  await new Promise((resolve) => setTimeout(resolve, 200));
  signal.throwIfAborted();
  return `charged ${orderId} with token ${fencingToken}`;
}
