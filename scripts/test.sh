#!/usr/bin/env bash
# Runs the whole test suite: unit tests, and black-box tests against real
# redis-server processes the tests start themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-redis.sh
# The TLS tests make their certificates with the openssl command.
scripts/ensure-package.sh openssl openssl
exec cargo test --locked "$@"
