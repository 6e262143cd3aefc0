#!/usr/bin/env bash
# Runs the TypeScript client's core test (core.js, on the built dist/)
# in every runtime its README names, against a running latchkey given by
# LATCHKEY_URL (and LATCHKEY_API_KEY where it has API keys): Node, Bun,
# Deno, workerd (through Miniflare) and Vercel's edge-runtime, each at the
# exact version pinned in package-lock.json. Fails when any runtime fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

: "${LATCHKEY_URL:?is not set: start latchkey (e.g. scripts/dev.sh), then LATCHKEY_URL=http://127.0.0.1:8080 clients/typescript/runtimes/run.sh}"

# The client as published: compiled to dist/ by its own build.
(cd .. && npm ci --silent --no-audit --no-fund && npm run --silent build)
npm ci --silent --no-audit --no-fund

# The edge-function examples of the book's "Client tools"
# (docs/src/client-tools.md) and of the client's README (TypeScript, importing
# "latchkey"), each bundled with the built client as a deployed function would
# be; core.js imports them. workerd and edge-runtime take one file: the test and
# the client bundled.
rm -rf build
mkdir -p build
for example in edge-function rate-limit-edge; do
  node_modules/.bin/esbuild "../examples/$example.ts" --bundle --format=esm --platform=neutral \
    --alias:latchkey=../dist/index.js --log-level=warning --outfile="build/$example.js"
done
node_modules/.bin/esbuild worker.js --bundle --format=esm --platform=neutral --log-level=warning --outfile=build/worker.js
node_modules/.bin/esbuild edge.js --bundle --format=iife --platform=browser --log-level=warning --outfile=build/edge.js

# No runtime looks for its own updates or sends telemetry.
export DENO_DIR="$PWD/build/deno" DENO_NO_UPDATE_CHECK=1 DO_NOT_TRACK=1
host=$(node -e 'console.log(new URL(process.env.LATCHKEY_URL).host)')

passed=0
failed=()
run() {
  local name=$1
  shift
  echo "== $name"
  if timeout 120 "$@"; then
    passed=$((passed + 1))
  else
    echo "== $name FAILED (exit $?)" >&2
    failed+=("$name")
  fi
}

run node node cli.js
run bun node_modules/.bin/bun run cli.js
run deno node_modules/.bin/deno run --no-prompt --allow-net="$host" --allow-env=LATCHKEY_URL,LATCHKEY_API_KEY cli.js
run workerd node run-workerd.js
run edge-runtime node run-edge.js

echo "runtimes: $passed passed, ${#failed[@]} failed"
if ((${#failed[@]} > 0)); then
  echo "failed in: ${failed[*]}" >&2
  exit 1
fi
