#!/usr/bin/env bash
# Builds and runs every benchmark (tests/bench/bench_*.cpp, build targets of the same name under the target
# `benchmarks`, which the default build leaves out), prints each one's table and writes one JSON file holding all
# results. Speeds are ratios against a baseline measured in the
# same run (see each benchmark's header comment).
# usage: tests/bench/run.sh [BUILD_DIR (default build/release)] [OUT_JSON (default BUILD_DIR/bench-results.json)]
set -euo pipefail
build="${1:-build/release}"
out="${2:-$build/bench-results.json}"
if [ -f "$build/CMakeCache.txt" ]; then
  cmake --build "$build" --target benchmarks
fi
benches=$(find "$build/tests/bench" -maxdepth 1 -type f -name 'bench_*' -perm -u+x | sort)
if [ -z "$benches" ]; then
  echo "run.sh: no benchmarks in $build/tests/bench (build the project first)" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
first=1
{
  printf '{\n  "machine": {"cores": %s, "date": "%s"},\n  "benchmarks": {\n' "$(nproc)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  for bench in $benches; do
    name=$(basename "$bench")
    echo "== $name" >&2
    "$bench" --json "$tmp/$name.json" >&2
    [ $first -eq 1 ] || printf ',\n'
    first=0
    printf '    "%s": ' "$name"
    cat "$tmp/$name.json"
  done
  printf '\n  }\n}\n'
} > "$tmp/all.json"
mv "$tmp/all.json" "$out"
echo "run.sh: results in $out" >&2
