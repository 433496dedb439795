#!/usr/bin/env bash
# Creates the Python venv the LLM proxy tests use (target/pyenv) with the official
# `openai` and `anthropic` SDKs and the `llmock` fault-injecting mock server, from PyPI.
# Skips whatever is already there. Usage: tests/support/llm/setup.sh [VENV_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
venv="${1:-$root/target/pyenv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
py="$venv/bin/python"
missing=()
for module in openai anthropic llmock; do
    "$py" -c "import $module" 2>/dev/null || missing+=("$module")
done
if [ "${#missing[@]}" -gt 0 ]; then
    "$py" -m pip install --quiet --disable-pip-version-check "${missing[@]}"
fi
"$py" -c 'import openai, anthropic; print("openai", openai.__version__, "anthropic", anthropic.__version__)'
