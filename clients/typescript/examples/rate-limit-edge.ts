// An edge function (the `fetch` handler shape of Cloudflare Workers, Deno
// Deploy, Bun and Vercel's edge runtime) that limits each client IP and the
// whole site with one call: both limits admit the request, or neither is
// charged for it.
import { Latchkey, RateLimitedError } from "latchkey";

const lk = new Latchkey(); // LATCHKEY_URL and LATCHKEY_API_KEY from the environment

// Configured once, with an admin key (e.g. at deploy):
//   await lk.rateLimiter("per-ip").configure({ rate: 20, perMs: 60_000 });
//   await lk.rateLimiter("site").configure({ rate: 500, perMs: 1_000 });
export const PER_IP = "per-ip";
export const SITE = "site";

export default {
  async fetch(request: Request): Promise<Response> {
    const ip = request.headers.get("x-forwarded-for")?.split(",")[0]?.trim() || "unknown";
    try {
      await lk.acquireLimits([{ name: PER_IP, key: ip }, { name: SITE }]);
    } catch (error) {
      if (error instanceof RateLimitedError) {
        const seconds = Math.max(1, Math.ceil((error.retryAfterMs ?? 1000) / 1000));
        const body = { error: "too many requests", limit: error.limit?.name };
        return Response.json(body, { status: 429, headers: { "Retry-After": String(seconds) } });
      }
      throw error;
    }
    return new Response(`hello, ${ip}\n`);
  },
};
