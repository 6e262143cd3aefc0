#!/usr/bin/env bash
# Runs the whole test suite: unit tests, and black-box tests against real
# redis-server processes the tests start themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
exec cargo test --locked "$@"
