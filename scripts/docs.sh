#!/usr/bin/env bash
# Builds the book (docs/, mdBook) into target/book and serves it on
# http://localhost:3000 (or the port given as the first argument) with
# Python's http.server. Rebuild by running it again.
set -euo pipefail
cd "$(dirname "$0")/.."
mdbook=$(scripts/ensure-mdbook.sh)
reference=docs/src/reference/settings.md
if [ ! -f "$reference" ]; then
  mkdir -p "$(dirname "$reference")"
  cargo build --locked --quiet --bin latchkey
  "${CARGO_TARGET_DIR:-target}/debug/latchkey" --print-config-reference >"$reference"
fi
"$mdbook" build docs --dest-dir "$PWD/${CARGO_TARGET_DIR:-target}/book"
port=${1:-3000}
echo "the book: http://localhost:$port/"
exec python3 -m http.server "$port" --bind 127.0.0.1 --directory "${CARGO_TARGET_DIR:-target}/book"
