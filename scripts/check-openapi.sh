#!/usr/bin/env bash
# Validates the committed OpenAPI document (openapi/openapi.json) with
# openapi-spec-validator. The test suite checks the rest: that the file is
# what the code generates, that every operation id is unique and names its
# resource and action, and that every error response shows its own
# examples (tests/api/openapi.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(scripts/ci-venv.sh)
"$bin/openapi-spec-validator" openapi/openapi.json
