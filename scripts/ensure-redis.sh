#!/usr/bin/env bash
# Makes sure redis-server is installed (latchkey's dev mode and its tests
# start private redis-server processes). Installs Debian's package if not.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
echo "redis-server not found; installing Debian's redis-server package" >&2
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "Please install redis-server (e.g. apt-get install -y redis-server) and retry." >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq redis-server >/dev/null
# The package starts a system-wide server on port 6379; latchkey doesn't
# need it (it starts its own on free ports), but leaves it alone.
command -v redis-server >/dev/null
