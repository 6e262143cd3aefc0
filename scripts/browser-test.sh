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
LATCHKEY_SERVER_LOG=$BROWSER_TEST_ARTIFACTS/server.log \
  scripts/with-dev-server.sh bash -c 'cd tests/browser && npm test --silent'
