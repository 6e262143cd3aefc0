#!/usr/bin/env bash
# Runs latchkey in dev mode on http://localhost:8080 (private Redis servers,
# no persistence; they stop when latchkey stops). Extra arguments are passed
# to latchkey, e.g. `scripts/dev.sh --listen 127.0.0.1:9090`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
exec cargo run --release --locked --bin latchkey -- "$@"
