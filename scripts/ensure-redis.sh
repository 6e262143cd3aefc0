#!/usr/bin/env bash
# Makes sure redis-server is installed (latchkey's dev mode and its tests
# start private redis-server processes). Installs Debian's package if not;
# the package starts a system-wide server on port 6379, which latchkey
# leaves alone (it starts its own on free ports).
set -euo pipefail
exec "$(dirname "$0")/ensure-package.sh" redis-server redis-server
