#!/usr/bin/env bash
# Makes sure mdBook (the book in docs/ is built with it) is installed in
# target/tools/bin, at the pinned version, from crates.io with `cargo
# install`. Only the `search` feature: no `serve`/`watch`, so a fresh CI
# machine compiles fewer crates (scripts/docs.sh serves the built book with
# Python's http.server instead). Prints the path of the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.4.52
root=$PWD/target/tools
bin=$root/bin/mdbook
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -qx "mdbook v$version"; then
  echo "$bin"
  exit 0
fi
echo "installing mdbook $version into $root (cargo install)" >&2
start=$(date +%s)
cargo install mdbook --version "$version" --locked --no-default-features \
  --features search --root "$root" >&2
echo "mdbook $version installed in $(( $(date +%s) - start )) s" >&2
echo "$bin"
