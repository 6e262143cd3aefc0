#!/usr/bin/env bash
# The client libraries' tests against a fresh latchkey in dev mode (real
# Redis) with an admin API key, so that every request also proves the key
# is sent and every object lives in the key's namespace:
# clients/python (pytest, installed into its own virtual environment) and
# clients/typescript (compiled with tsc, run with Node's test runner), and
# runtimes: the TypeScript client's core test in every runtime its README
# names (clients/typescript/runtimes/run.sh: Node, Bun, Deno, workerd,
# edge-runtime). The latchkey CLI's own tests are part of scripts/test.sh
# (tests/api/cli.rs). Extra arguments name the suites to run: python,
# typescript, runtimes (default all three, in that order).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-package.sh npm npm
if [ $# -eq 0 ]; then
  set -- python typescript runtimes
fi
LATCHKEY_API_KEY="client-tests-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
export LATCHKEY_API_KEY
LATCHKEY_API_KEYS="client-tests:admin:$(printf %s "$LATCHKEY_API_KEY" | sha256sum | cut -d' ' -f1)"
export LATCHKEY_API_KEYS
export LATCHKEY_SERVER_LOG=${LATCHKEY_SERVER_LOG:-${CARGO_TARGET_DIR:-target}/client-tests/server.log}
# set -e: a failed suite fails the run (the inner shell does not inherit it).
# shellcheck disable=SC2016 # expanded by the inner shell, once the server runs
scripts/with-dev-server.sh bash -c '
  set -e
  for suite in "$@"; do
    case $suite in
      runtimes) clients/typescript/runtimes/run.sh ;;
      *) "clients/$suite/run-tests.sh" ;;
    esac
  done' _ "$@"
