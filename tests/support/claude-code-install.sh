#!/usr/bin/env bash
# Installs the real Claude Code CLI for tests/claude_code.rs into target/claude-code/:
# the `@anthropic-ai/claude-code` npm package, whose postinstall puts the native binary
# (from `@anthropic-ai/claude-code-linux-x64`) at node_modules/.bin/claude.
# Skips the install when the binary is already there. Usage: bash tests/support/claude-code-install.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
prefix="$root/target/claude-code"
bin="$prefix/node_modules/.bin/claude"
mkdir -p "$prefix"
if [ ! -x "$bin" ]; then
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error '@anthropic-ai/claude-code@^2.1.328'
fi
[ -x "$bin" ] || { echo "claude-code install incomplete in $prefix" >&2; exit 1; }
echo "claude-code $("$bin" --version) in $prefix"
