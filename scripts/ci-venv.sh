#!/usr/bin/env bash
# Makes the Python virtual environment of the CI tools (.ci/requirements.txt)
# at target/ci-venv, unless it is already there with those exact pins, and
# prints its bin directory. Only python3 (with venv and pip) is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${CARGO_TARGET_DIR:-target}/ci-venv"
stamp="$venv/requirements.txt"
if [ ! -x "$venv/bin/python" ] || ! cmp -s .ci/requirements.txt "$stamp"; then
  if ! python3 -m venv --help >/dev/null 2>&1; then
    echo "python3 with the venv module is needed (Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check -r .ci/requirements.txt >&2
  cp .ci/requirements.txt "$stamp"
fi
cd "$venv/bin" && pwd
