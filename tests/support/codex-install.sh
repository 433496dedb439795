#!/usr/bin/env bash
# Installs the real Codex CLI for tests/codex.rs into target/codex/: the `@openai/codex`
# npm package, whose native binary comes with it (`@openai/codex-linux-x64`); its
# `bin/codex` launcher runs on the machine's Node. Skips the install when it is there.
# Usage: bash tests/support/codex-install.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
prefix="$root/target/codex"
bin="$prefix/node_modules/.bin/codex"
mkdir -p "$prefix"
if [ ! -x "$bin" ]; then
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error '@openai/codex@0.171.0'
fi
[ -x "$bin" ] || { echo "codex install incomplete in $prefix" >&2; exit 1; }
echo "codex $("$bin" --version) in $prefix"
