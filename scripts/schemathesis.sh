#!/usr/bin/env bash
# Schemathesis over every operation of the OpenAPI document a fresh latchkey
# in dev mode serves (the committed one, with this server's bounds): generated valid and invalid requests, all
# built-in checks (no 5xx; status, media type, headers and body as
# documented; invalid input rejected) and latchkey's own check
# (tests/schemathesis/hooks.py: every error is a problem document of a type
# documented for that operation and status). Long-polls are capped by a
# small LATCHKEY_MAX_WAIT_MS, so the run is bounded. It runs against an
# open server and against one with an API key (below). Extra arguments go to
# `schemathesis run`, e.g. `scripts/schemathesis.sh -n 500` for a longer run.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(scripts/ci-venv.sh)
report=${CARGO_TARGET_DIR:-target}/schemathesis
rm -rf "$report"
export SCHEMATHESIS_HOOKS=hooks
export PYTHONPATH=$PWD/tests/schemathesis
export LATCHKEY_MAX_WAIT_MS=${LATCHKEY_MAX_WAIT_MS:-300}
# Twice: against an open server (no API key, as in dev mode), and against
# one with an admin API key, whose document requires it: every request
# then sends the key, and Schemathesis's own check also sends requests
# without it, which must be refused.
key="schemathesis-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
hash=$(printf %s "$key" | sha256sum | cut -d' ' -f1)
for run in open keyed; do
  mkdir -p "$report/$run"
  auth=()
  if [ "$run" = keyed ]; then
    export LATCHKEY_API_KEYS="schemathesis:admin:$hash"
    auth=(-H "Authorization: Bearer $key")
  fi
  # shellcheck disable=SC2016 # expanded by the inner shell, once the server runs
  LATCHKEY_SERVER_LOG=$report/$run/server.log scripts/with-dev-server.sh bash -c '
    export LATCHKEY_OPENAPI=$1/openapi.json
    curl -fsS -o "$LATCHKEY_OPENAPI" "$LATCHKEY_URL/openapi.json"
    "$0/schemathesis" --config-file tests/schemathesis/schemathesis.toml run "$LATCHKEY_OPENAPI" --url "$LATCHKEY_URL" \
      --checks all --exclude-checks use_after_free --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-40}" --seed "${SCHEMATHESIS_SEED:-1}" \
      --request-timeout 10 --workers 1 --no-color \
      --report junit --report-dir "$1" "${@:2}"
  ' "$bin" "$report/$run" "${auth[@]}" "$@"
done
