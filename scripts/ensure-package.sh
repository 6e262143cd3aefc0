#!/usr/bin/env bash
# Makes sure a command is installed, installing the Debian package that
# provides it if not: `scripts/ensure-package.sh COMMAND PACKAGE`.
set -euo pipefail
command_name=$1
package=$2
if command -v "$command_name" >/dev/null 2>&1; then
  exit 0
fi
echo "$command_name not found; installing Debian's $package package" >&2
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "Please install $package (e.g. apt-get install -y $package) and retry." >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "$package" >/dev/null
command -v "$command_name" >/dev/null
