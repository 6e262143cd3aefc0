#!/usr/bin/env bash
# Schemathesis over every operation of the OpenAPI document a fresh latchkey
# in dev mode serves (the committed one, with this server's bounds): generated valid and invalid requests, all
# built-in checks (no 5xx; status, media type, headers and body as
# documented; invalid input rejected) and latchkey's own check
# (tests/schemathesis/hooks.py: every error is a problem document of a type
# documented for that operation and status). Long-polls are capped by a
# small LATCHKEY_MAX_WAIT_MS, so the run is bounded. Extra arguments go to
# `schemathesis run`, e.g. `scripts/schemathesis.sh -n 500` for a longer run.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(scripts/ci-venv.sh)
report=${CARGO_TARGET_DIR:-target}/schemathesis
rm -rf "$report"
export SCHEMATHESIS_HOOKS=hooks
export PYTHONPATH=$PWD/tests/schemathesis
export LATCHKEY_MAX_WAIT_MS=${LATCHKEY_MAX_WAIT_MS:-300}
export LATCHKEY_SERVER_LOG=$report/server.log
mkdir -p "$report"
# shellcheck disable=SC2016 # expanded by the inner shell, once the server runs
scripts/with-dev-server.sh bash -c '
  export LATCHKEY_OPENAPI=$1/openapi.json
  curl -fsS -o "$LATCHKEY_OPENAPI" "$LATCHKEY_URL/openapi.json"
  "$0/schemathesis" --config-file tests/schemathesis/schemathesis.toml run "$LATCHKEY_OPENAPI" --url "$LATCHKEY_URL" \
    --checks all --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-40}" --seed "${SCHEMATHESIS_SEED:-1}" \
    --request-timeout 10 --workers 1 --no-color \
    --report junit --report-dir "$1" "${@:2}"
' "$bin" "$report" "$@"
