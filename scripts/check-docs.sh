#!/usr/bin/env bash
# The book in docs/ (mdBook): builds it into target/book, fails on a broken
# link between its chapters, a missing #anchor or a missing repository file
# it links to (scripts/docs/check_links.py), then runs every example of it
# against a real latchkey in dev mode (real redis-servers, one fresh
# latchkey per chapter) and compares what each prints with what the book
# shows (scripts/docs/run_examples.py; the convention is in the book's
# "What CI checks" chapter). Python examples run with clients/python
# installed in a virtual environment, TypeScript ones with the built
# clients/typescript in Node. Extra arguments are chapter files to run
# (default: README.md and all of them).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/ensure-redis.sh
scripts/ensure-package.sh curl curl
scripts/ensure-package.sh npm npm
mdbook=$(scripts/ensure-mdbook.sh)
cargo build --locked --quiet --bin latchkey
target_dir=${CARGO_TARGET_DIR:-target}


# mdBook takes a relative --dest-dir from the book's root: give it an absolute one.
book=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/book
"$mdbook" build docs --dest-dir "$book"
python3 scripts/docs/check_links.py "$book" docs/src README.md

# The Python client, installed as users get it (as clients/python/run-tests.sh does).
venv=$target_dir/docs-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps clients/python
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir clients/python
# The TypeScript client, built (scripts/client-tests.sh has installed its
# dependencies in CI; a fresh checkout installs them here).
if [ ! -x clients/typescript/node_modules/.bin/tsc ]; then
  (cd clients/typescript && npm ci --silent --no-audit --no-fund)
fi
(cd clients/typescript && npm run --silent build)

python3 scripts/docs/run_examples.py --binary "$target_dir/debug/latchkey" \
  --python "$venv/bin/python" --node-client clients/typescript \
  --work "$target_dir/docs-examples" "$@"
echo "check-docs: the book built, its links hold and its examples ran in $(( $(date +%s) - start )) s"
