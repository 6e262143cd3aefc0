#!/usr/bin/env bash
# Runs a command against a fresh latchkey in dev mode (its own private Redis
# servers) on a free local port: builds the debug binary, starts it, waits
# until /readyz answers 200, runs the command with LATCHKEY_URL set, and
# stops the server however the command ends. The server's log is kept in
# $LATCHKEY_SERVER_LOG (default target/dev-server.log). Settings for the
# server are passed as LATCHKEY_* variables, e.g.
#   LATCHKEY_MAX_WAIT_MS=500 scripts/with-dev-server.sh curl -s '$LATCHKEY_URL/readyz'
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
scripts/ensure-package.sh curl curl
cargo build --locked --quiet --bin latchkey
target_dir=${CARGO_TARGET_DIR:-target}
log=${LATCHKEY_SERVER_LOG:-$target_dir/dev-server.log}
mkdir -p "$(dirname "$log")"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LATCHKEY_LISTEN="127.0.0.1:$port" "$target_dir/debug/latchkey" >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
export LATCHKEY_URL="http://127.0.0.1:$port"
for _ in $(seq 1 300); do
  if curl -fs -o /dev/null "$LATCHKEY_URL/readyz"; then
    break
  fi
  if ! kill -0 "$server" 2>/dev/null; then
    echo "latchkey exited before it was ready; its log ($log):" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
done
curl -fs -o /dev/null "$LATCHKEY_URL/readyz" || { echo "latchkey not ready after 30 s; log: $log" >&2; exit 1; }
"$@"
