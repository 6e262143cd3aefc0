#!/usr/bin/env bash
# Builds the book (docs/, mdBook) into target/book and serves it on
# http://localhost:3000 (or the port given as the first argument) with
# Python's http.server. Rebuild by running it again.
set -euo pipefail
cd "$(dirname "$0")/.."
mdbook=$(scripts/ensure-mdbook.sh)
# mdBook takes a relative --dest-dir from the book's root: give it an absolute one.
book=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/book
"$mdbook" build docs --dest-dir "$book"
port=${1:-3000}
echo "the book: http://localhost:$port/"
exec python3 -m http.server "$port" --bind 127.0.0.1 --directory "$book"
