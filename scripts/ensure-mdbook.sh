#!/usr/bin/env bash
# Makes sure mdBook (the book in docs/ is built with it) is installed in
# target/tools/bin, at the pinned version, from crates.io with `cargo
# install`. Only the `search` feature: no `serve`/`watch`, so a fresh CI
# machine compiles fewer crates (scripts/docs.sh serves the built book with
# Python's http.server instead). CI clones the repository afresh for every
# run, so the binary is also kept in /var/cache/latchkey-tools (as
# scripts/check-image.sh keeps its images in /var/cache/latchkey-image;
# LATCHKEY_TOOLS_CACHE names another directory, empty: none), and a later
# run on the same machine copies it instead of compiling it again (about
# 4 minutes of CPU). Prints the path of the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.4.52
target_dir=${CARGO_TARGET_DIR:-target}
case $target_dir in
  /*) ;;
  *) target_dir=$PWD/$target_dir ;;
esac
root=$target_dir/tools
bin=$root/bin/mdbook
cache=${LATCHKEY_TOOLS_CACHE-/var/cache/latchkey-tools}
cached=${cache:+$cache/mdbook-$version}
pinned() { [ -x "$1" ] && "$1" --version 2>/dev/null | grep -qx "mdbook v$version"; }
if pinned "$bin"; then
  echo "$bin"
  exit 0
fi
mkdir -p "$root/bin"
if [ -n "$cached" ] && pinned "$cached"; then
  cp "$cached" "$bin"
  echo "$bin"
  exit 0
fi
echo "installing mdbook $version into $root (cargo install)" >&2
start=$(date +%s)
cargo install mdbook --version "$version" --locked --no-default-features \
  --features search --root "$root" >&2
echo "mdbook $version installed in $(($(date +%s) - start)) s" >&2
if [ -n "$cached" ] && mkdir -p "$cache" 2>/dev/null && cp "$bin" "$cached.tmp" 2>/dev/null; then
  mv "$cached.tmp" "$cached"
fi
echo "$bin"
