#!/usr/bin/env bash
# Swagger UI in a real browser: Debian's chromium, headless, driven by
# playwright-core (tests/browser), against a fresh latchkey in dev mode.
# For every primitive it uses "Try it out" on /docs as a person would and
# checks the request's path and the answer the page shows. On a failure the
# page's screenshot and HTML are kept in target/browser-test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-package.sh chromium chromium
scripts/ensure-package.sh npm npm
(cd tests/browser && npm ci --silent --no-audit --no-fund)
export CHROMIUM=${CHROMIUM:-$(command -v chromium)}
target_dir=$(mkdir -p "${CARGO_TARGET_DIR:-target}" && cd "${CARGO_TARGET_DIR:-target}" && pwd)
export BROWSER_TEST_ARTIFACTS=${BROWSER_TEST_ARTIFACTS:-$target_dir/browser-test}
rm -rf "$BROWSER_TEST_ARTIFACTS"
# A second server with an API key, for the Authorize button: the tests
# run with LATCHKEY_URL (open) and BROWSER_KEYED_URL (keyed).
key="browser-test-admin-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
export BROWSER_KEYED_ADMIN_KEY=$key
export BROWSER_KEYED_API_KEYS="browser:admin:$(printf %s "$key" | sha256sum | cut -d' ' -f1)"
# shellcheck disable=SC2016 # expanded by the inner shells, once the servers run
LATCHKEY_SERVER_LOG=$BROWSER_TEST_ARTIFACTS/server.log \
  scripts/with-dev-server.sh bash -c '
    export BROWSER_OPEN_URL=$LATCHKEY_URL
    LATCHKEY_SERVER_LOG=$BROWSER_TEST_ARTIFACTS/keyed-server.log LATCHKEY_API_KEYS=$BROWSER_KEYED_API_KEYS \
      scripts/with-dev-server.sh bash -c '"'"'
        export BROWSER_KEYED_URL=$LATCHKEY_URL LATCHKEY_URL=$BROWSER_OPEN_URL
        cd tests/browser && npm test --silent'"'"'
  '
