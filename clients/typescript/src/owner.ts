// Owner labels: who acquires, in words, for people reading state reads and
// refusals (`holds`, `held_by`). Not a secret: every client of the
// namespace sees them.

/** The longest label the service accepts, in bytes of UTF-8. */
export const MAX_OWNER_BYTES = 200;

interface ProcessLike {
  pid?: number;
  argv?: string[];
  release?: { name?: string };
}

function basename(path: string): string {
  const parts = path.split(/[\\/]/);
  return parts[parts.length - 1] ?? "";
}

/**
 * `"<host> pid <pid> <program>"`: the program is `process.argv[1]`'s base
 * name (else the runtime's name). Where there is no `process` (a browser,
 * Deno): `"<host> <runtime>"`.
 */
export async function defaultOwner(): Promise<string> {
  const global = globalThis as {
    process?: ProcessLike;
    Deno?: unknown;
    location?: { hostname?: string };
  };
  const proc = global.process;
  if (proc?.pid !== undefined) {
    let host = "localhost";
    try {
      // A specifier in a variable: bundlers for browsers leave it alone.
      const module = "node:os";
      const os = (await import(module)) as { hostname(): string };
      host = os.hostname();
    } catch {
      // no node:os here: keep the fallback
    }
    const program = basename(proc.argv?.[1] ?? "") || proc.release?.name || "node";
    return `${host} pid ${proc.pid} ${program}`;
  }
  const runtime = global.Deno !== undefined ? "deno" : "browser";
  return `${global.location?.hostname || "localhost"} ${runtime}`;
}

/**
 * A label as the service accepts it: control characters become spaces,
 * and it is cut to 200 bytes of UTF-8 between characters. `undefined`
 * (send none) for an empty label.
 */
export function cleanOwner(label: string): string | undefined {
  // eslint-disable-next-line no-control-regex
  const printable = label.replace(/[\u0000-\u001f\u007f-\u009f]/g, " ");
  let out = "";
  let bytes = 0;
  for (const ch of printable) {
    const size = new TextEncoder().encode(ch).length;
    if (bytes + size > MAX_OWNER_BYTES) break;
    out += ch;
    bytes += size;
  }
  return out === "" ? undefined : out;
}
