#!/usr/bin/env bash
# Checks the Helm chart (helm/latchkey) and the Dockerfile offline: yamllint
# on the chart's and the check's value files, hadolint on the Dockerfile,
# then tests/chart/check.py, which lints and renders the chart with Helm's
# own code (helm-python-sdk), validates every manifest with
# kubernetes-validate and checks the chart's invariants (docs/src/ci.md, "What
# CI checks"). The tools come from .ci/requirements.txt (scripts/ci-venv.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(scripts/ci-venv.sh)
"$bin/yamllint" --strict -d relaxed \
  helm/latchkey/Chart.yaml helm/latchkey/values.yaml tests/chart/values/*.yaml
"$bin/hadolint" Dockerfile
"$bin/python" tests/chart/check.py
