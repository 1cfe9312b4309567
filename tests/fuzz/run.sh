#!/usr/bin/env bash
# Runs the libFuzzer targets of a `fuzz` build (builds nothing), one after another, each for SECONDS.
#
#   tests/fuzz/run.sh BUILD_DIR SECONDS_PER_TARGET [TARGET...]      e.g. tests/fuzz/run.sh build/fuzz 30
#
# TARGET is a name without the fuzz_ prefix (default: all eight). Each target works in BUILD_DIR/fuzz-work/TARGET:
# corpus/ (seeded on first use from tests/fuzz/seeds/TARGET and the project's own files: resources/, tests/),
# artifacts/ (crash-*, timeout-*, oom-*, leak-* inputs) and log.txt. Prints a table (target, seconds, executions,
# exec/s, cov, ft, corpus, crashes) and writes BUILD_DIR/fuzz-work/results.json. Exit status 1 when any target
# found something (the input's path is printed: add it to tests/fuzz/regressions/TARGET/ once fixed), 2 on
# usage errors. Every input has a time and memory limit (FUZZ_TIMEOUT, FUZZ_RSS_MB, FUZZ_MALLOC_MB below). Targets
# run one at a time on one core. FUZZ_KEEP_GOING=1 runs each target in libFuzzer's fork mode
# (-fork=1, still one process at a time) and keeps fuzzing after a crash, timeout or OOM, so that a long run
# collects every finding instead of stopping at the first.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
all_targets=(safetensors config tokenizer recipe prompts runfile candidates import tensorboard)

if [ $# -lt 2 ] || ! [[ "$2" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 BUILD_DIR SECONDS_PER_TARGET [TARGET...]   (targets: ${all_targets[*]})" >&2
  exit 2
fi
build="$(cd "$1" 2>/dev/null && pwd)" || { echo "run.sh: no build directory $1" >&2; exit 2; }
seconds="$2"
shift 2
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/fuzz_$t"
  if [ ! -x "$bin" ]; then
    echo "run.sh: $bin not built (cmake --preset fuzz && cmake --build --preset fuzz --target fuzz_all)" >&2
    exit 2
  fi
done

work="$build/fuzz-work"
mkdir -p "$work"

# seed NAME BYTE FILE: copy FILE into the corpus, prefixed by BYTE (two hex digits) when BYTE is not "-".
seed() {
  local corpus="$1" byte="$2" file="$3" name
  [ -f "$file" ] || return 0
  name="$(echo "$byte-$file" | tr '/ ' '__')"
  if [ "$byte" = "-" ]; then
    cp "$file" "$corpus/$name"
  else
    { printf "\\x$byte"; cat "$file"; } > "$corpus/$name"
  fi
}

# seed_text CORPUS BYTE TEXT
seed_text() {
  local corpus="$1" byte="$2" text="$3"
  { printf "\\x$byte"; printf '%s' "$text"; } > "$corpus/text-$byte-$(printf '%s' "$text" | cksum | cut -d' ' -f1)"
}

make_seeds() {
  local t="$1" corpus="$2" f line n
  for f in "$here/seeds/$t"/*; do [ -f "$f" ] && cp "$f" "$corpus/"; done
  case "$t" in
    safetensors)
      # The shipped checkpoints' real headers (the data section cut off) and the first 64 KiB of one.
      for f in "$root"/resources/models/*/model.safetensors; do
        n=$(od -An -tu8 -N8 "$f" | tr -d ' ')
        head -c $((8 + n)) "$f" > "$corpus/header-$(basename "$(dirname "$f")")"
      done
      head -c 65536 "$root/resources/models/arith-student/model.safetensors" > "$corpus/student-64k"
      ;;
    config)
      for f in "$root"/resources/models/*/config.json; do seed "$corpus" - "$f"; done
      ;;
    tokenizer)
      seed "$corpus" 00 "$root/resources/models/arith-student/tokenizer.json"
      for f in "$here"/data/tokenizer-*.json; do seed "$corpus" 00 "$f"; done
      n=0
      while IFS= read -r line && [ $n -lt 24 ]; do
        for b in 01 02 03 06; do seed_text "$corpus" $b "$line"; done
        n=$((n + 1))
      done < "$root/tests/tokenizer/corpus.jsonl"
      while IFS= read -r line; do
        for b in 01 02 03; do seed_text "$corpus" $b "$line"; done
      done < <(head -n 4 "$root/resources/prompts/arith-probe.jsonl")
      ;;
    recipe)
      for f in "$root"/resources/recipes/*.yaml "$root"/tests/recipe/*.yaml "$root"/tests/export/*.yaml \
               "$root"/tests/export/golden/*.yaml; do
        seed "$corpus" 01 "$f"
      done
      for f in "$root"/tests/recipe/*.json "$root"/tests/export/golden/*.json; do seed "$corpus" 00 "$f"; done
      seed "$corpus" 02 "$root/resources/recipes/fp8-keep-edges.yaml"
      seed "$corpus" 02 "$root/tests/recipe/spec-example.json"
      ;;
    prompts)
      seed "$corpus" - "$root/resources/prompts/arith-probe.jsonl"
      head -n 16 "$root/resources/prompts/arith-heldout.jsonl" > "$corpus/heldout-16"
      ;;
    runfile)
      for f in "$root"/resources/runs/*.yaml "$root"/tests/runfile/*.yaml "$root"/tests/gpu/ttq-*.yaml; do
        seed "$corpus" - "$f"
      done
      ;;
    candidates)
      seed "$corpus" - "$root/resources/candidates/demo.yaml"
      ;;
    import)
      local fx="$root/tests/import/fixtures"
      for b in 00 04 08 0c; do seed "$corpus" $b "$fx/verl_metrics.jsonl"; done
      for b in 01 05; do seed "$corpus" $b "$fx/tinker_metrics.jsonl"; done
      for b in 02 06 0a 0e; do seed "$corpus" $b "$fx/generic.csv"; done
      for b in 03 07 0b 0f 13 23 33; do seed "$corpus" $b "$fx/per_layer_quant_enabled.json"; done
      ;;
  esac
}

# Per input (issue #17): slowness and memory are findings. An input that runs longer than FUZZ_TIMEOUT seconds
# (default 5; the targets take milliseconds per input), makes the process grow past FUZZ_RSS_MB (default 2048:
# LibTorch and the sanitizers take about 400 MB before the first input) or allocates more than FUZZ_MALLOC_MB at
# once (default 1024) is written as timeout-*, oom-* or crash-* and counted in the table.
per_input_seconds="${FUZZ_TIMEOUT:-5}"
rss_mb="${FUZZ_RSS_MB:-2048}"
malloc_mb="${FUZZ_MALLOC_MB:-1024}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$here/ubsan.supp}"
export OMP_NUM_THREADS=1

found=0
rows=()
json_rows=()
for t in "${targets[@]}"; do
  dir="$work/$t"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  if [ -z "$(ls -A "$dir/corpus")" ]; then
    make_seeds "$t" "$dir/corpus"
  fi
  dict=()
  [ -f "$here/dict/$t.dict" ] && dict=(-dict="$here/dict/$t.dict")
  before=$(ls "$dir/artifacts" | wc -l)
  echo "run.sh: fuzz_$t for ${seconds}s (corpus $(ls "$dir/corpus" | wc -l) files)" >&2
  start=$(date +%s)
  mode=()
  [ "${FUZZ_KEEP_GOING:-0}" = "1" ] && mode=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  (cd "$dir" && timeout --signal=KILL $((seconds + 300)) "$build/tests/fuzz/fuzz_$t" "${mode[@]}" \
      -max_total_time="$seconds" -timeout="$per_input_seconds" -rss_limit_mb="$rss_mb" -malloc_limit_mb="$malloc_mb" \
      -print_final_stats=1 \
      -artifact_prefix="$dir/artifacts/" "${dict[@]}" "$dir/corpus" > "$dir/log.txt" 2>&1)
  status=$?
  elapsed=$(( $(date +%s) - start ))
  execs=$(grep -m1 -oP 'stat::number_of_executed_units: \K[0-9]+' "$dir/log.txt" || true)
  rate=$(grep -m1 -oP 'stat::average_exec_per_sec: *\K[0-9]+' "$dir/log.txt" || true)
  last=$(grep -E '^#[0-9]+:?[[:space:]]' "$dir/log.txt" | grep 'cov: ' | tail -n 1)
  [ -z "$rate" ] && rate=$(echo "$last" | grep -oP 'exec/s:? \K[0-9]+' || true)
  cov=$(echo "$last" | grep -oP 'cov: \K[0-9]+' || true)
  ft=$(echo "$last" | grep -oP 'ft: \K[0-9]+' || true)
  [ -z "$execs" ] && execs=$(echo "$last" | grep -oP '^#\K[0-9]+' || true)
  [ "${FUZZ_KEEP_GOING:-0}" = "1" ] && execs=$(echo "$last" | grep -oP '^#\K[0-9]+' || true)
  corpus=$(ls "$dir/corpus" | wc -l)
  new_artifacts=$(( $(ls "$dir/artifacts" | wc -l) - before ))
  crashes=$new_artifacts
  if [ "$status" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes=1; fi
  rows+=("$(printf '%-12s %6s %12s %8s %7s %7s %7s %7s' "$t" "$elapsed" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$corpus" "$crashes")")
  json_rows+=("{\"target\":\"$t\",\"seconds\":$elapsed,\"executions\":${execs:-null},\"exec_per_s\":${rate:-null},\"cov\":${cov:-null},\"ft\":${ft:-null},\"corpus\":$corpus,\"crashes\":$crashes,\"exit_status\":$status}")
  if [ "$crashes" -ne 0 ]; then
    found=1
    echo "run.sh: fuzz_$t FOUND SOMETHING (exit status $status); log: $dir/log.txt" >&2
    grep -E 'ERROR|SUMMARY|runtime error|uncaught|property violated|Test unit written' "$dir/log.txt" | head -n 12 >&2
    for a in $(ls -t "$dir/artifacts" | head -n "$((new_artifacts > 0 ? new_artifacts : 0))"); do
      echo "run.sh: crash input: $dir/artifacts/$a" >&2
    done
  fi
done

echo
printf '%-12s %6s %12s %8s %7s %7s %7s %7s\n' target seconds executions exec/s cov ft corpus crashes
for r in "${rows[@]}"; do echo "$r"; done
{
  echo "{\"date\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\",\"seconds_per_target\":$seconds,\"machine\":\"$(uname -m), $(nproc) cores\",\"targets\":["
  (IFS=,; echo "${json_rows[*]}")
  echo "]}"
} > "$work/results.json"
echo "run.sh: results in $work/results.json" >&2
exit $found
