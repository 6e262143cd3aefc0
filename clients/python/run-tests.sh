#!/usr/bin/env bash
# Runs the Python client's tests against a running latchkey.
#
#   LATCHKEY_URL=http://127.0.0.1:8080 clients/python/run-tests.sh [pytest args...]
#
# Installs the package (with its `test` extra) into a virtualenv under the
# Cargo target directory, checks that src/latchkey/_sync.py is generated
# from _async.py (scripts/gen_sync.py --check), then runs pytest. LATCHKEY_URL is required: the
# tests talk to the real service, there are no mocks.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

if [[ -z "${LATCHKEY_URL:-}" ]]; then
    echo "run-tests.sh: LATCHKEY_URL is not set; start latchkey (e.g. scripts/dev.sh) and set LATCHKEY_URL=http://127.0.0.1:8080" >&2
    exit 2
fi

python="${PYTHON:-python3}"
venv="${CARGO_TARGET_DIR:-target}/python-client-venv"
if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
# A real (non-editable) install: the tests import the package as users get
# it. --force-reinstall --no-deps first, so that a changed checkout with the
# same version number is installed again.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "clients/python"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir "clients/python[test]"

# The sync client (_sync.py) is generated from the asyncio one (_async.py)
# with unasync (in the test extra): fail when someone edited one without
# the other.
"$venv/bin/python" clients/python/scripts/gen_sync.py --check

exec "$venv/bin/python" -m pytest -q clients/python/tests "$@"
