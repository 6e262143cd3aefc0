#!/usr/bin/env bash
# Swagger UI and the console in a real browser: Debian's chromium, headless,
# driven by playwright-core (tests/browser), against a fresh latchkey in dev
# mode. For every primitive it uses "Try it out" on /docs as a person would
# and checks the request's path and the answer the page shows; then it
# drives the operator console (/console) with API keys of two namespaces,
# a lock held by `latchkey lock`, and saves the console's screenshot as
# target/browser-test/console.png. On a failure the page's screenshot and
# HTML are kept in target/browser-test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-package.sh chromium chromium
scripts/ensure-package.sh npm npm
(cd tests/browser && npm ci --silent --no-audit --no-fund)
export CHROMIUM=${CHROMIUM:-$(command -v chromium)}
target_dir=$(mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)
export BROWSER_TEST_ARTIFACTS=${BROWSER_TEST_ARTIFACTS:-$target_dir/browser-test}
rm -rf "$BROWSER_TEST_ARTIFACTS"
# A second server with API keys, for Swagger UI's Authorize button and for
# the console (an admin and a client key of one namespace, and an admin
# key of another): the tests run with LATCHKEY_URL (open) and
# BROWSER_KEYED_URL (keyed), and run the client tools from LATCHKEY_BIN.
new_key() { printf '%s-%s' "$1" "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"; }
hash_of() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
BROWSER_KEYED_ADMIN_KEY=$(new_key browser-test-admin)
CONSOLE_ADMIN_KEY=$(new_key console-admin)
CONSOLE_CLIENT_KEY=$(new_key console-client)
CONSOLE_OTHER_KEY=$(new_key console-other)
export BROWSER_KEYED_ADMIN_KEY CONSOLE_ADMIN_KEY CONSOLE_CLIENT_KEY CONSOLE_OTHER_KEY
BROWSER_KEYED_API_KEYS="browser:admin:$(hash_of "$BROWSER_KEYED_ADMIN_KEY"),ops:admin:$(hash_of "$CONSOLE_ADMIN_KEY"),ops:client:$(hash_of "$CONSOLE_CLIENT_KEY"),other:admin:$(hash_of "$CONSOLE_OTHER_KEY")"
export BROWSER_KEYED_API_KEYS
export LATCHKEY_BIN=$target_dir/debug/latchkey
# shellcheck disable=SC2016 # expanded by the inner shells, once the servers run
LATCHKEY_SERVER_LOG=$BROWSER_TEST_ARTIFACTS/server.log \
  scripts/with-dev-server.sh bash -c '
    export BROWSER_OPEN_URL=$LATCHKEY_URL
    LATCHKEY_SERVER_LOG=$BROWSER_TEST_ARTIFACTS/keyed-server.log LATCHKEY_API_KEYS=$BROWSER_KEYED_API_KEYS \
      scripts/with-dev-server.sh bash -c '"'"'
        export BROWSER_KEYED_URL=$LATCHKEY_URL LATCHKEY_URL=$BROWSER_OPEN_URL
        cd tests/browser && npm test --silent'"'"'
  '
