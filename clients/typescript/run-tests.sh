#!/usr/bin/env bash
# Builds the TypeScript client and runs its tests (node:test, on the
# compiled output) against a running latchkey given by LATCHKEY_URL.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if [[ -z "${LATCHKEY_URL:-}" ]]; then
  echo "run-tests.sh: LATCHKEY_URL is not set; start latchkey (e.g. scripts/dev.sh) and run" >&2
  echo "  LATCHKEY_URL=http://127.0.0.1:8080 clients/typescript/run-tests.sh" >&2
  exit 2
fi

npm ci --silent --no-audit --no-fund
npm run build
npm test
