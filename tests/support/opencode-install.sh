#!/usr/bin/env bash
# Installs the real OpenCode CLI for tests/opencode.rs into target/opencode/: the
# `opencode-ai` npm package, whose native binary comes with it (`opencode-linux-x64`, a
# Bun executable); its `bin/opencode` launcher runs on the machine's Node. Skips the
# install when it is there.
# Usage: bash tests/support/opencode-install.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
prefix="$root/target/opencode"
bin="$prefix/node_modules/.bin/opencode"
mkdir -p "$prefix"
if [ ! -x "$bin" ]; then
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error 'opencode-ai@1.18.33'
fi
[ -x "$bin" ] || { echo "opencode install incomplete in $prefix" >&2; exit 1; }
echo "opencode $("$bin" --version) in $prefix"
