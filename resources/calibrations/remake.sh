#!/usr/bin/env bash
# Re-makes the shipped calibration of the demo student (spec "Reproducibility") with a release build:
#   resources/calibrations/arith-student.json     `mismatch calibrate --json` of the protocol below, unedited
#   resources/models/arith-student-step100/       the baseline's first-seed checkpoint at step 100 (config.json,
#                                                 model.safetensors, tokenizer.json, state.json), which `mismatch demo`
#                                                 screens against the step-100 bracket
# and, with --short, the shortened version a test re-makes and compares figure for figure on the same compute path
# (tests/cli/test_cli.cpp, shortenedCalibrationIsReproducible):
#   resources/calibrations/arith-student-short.json
#
# usage: resources/calibrations/remake.sh [--short] [--out DIR] [--workspace DIR] [--mismatch BINARY]
#   --out DIR         where the files are written (default: the repository's resources/); DIR/calibrations/...
#                     and DIR/models/...
#   --workspace DIR   a new directory for the workspace the calibration trains in (default: a new temporary
#                     directory, kept and printed: its runs' step data stay there)
#   --mismatch BIN    the CLI to use (default: build/release/app/mismatch, built here first with the release preset)
# The protocol (full): resources/runs/demo-opd.yaml (200 steps of 64 prompts, 40 tokens, lr 5e-4, held-out
# evaluation of 512 problems at steps 100 and 200), noise 0.1, 0.2, 0.3, 0.4, two seeds per configuration to start
# and up to four for undecided points (calibrate's defaults), the rule at steps 100 and 200. About 4 min a run on a
# quiet 2-core machine; 12 runs at least.
# The shortened protocol (--short): the same run file cut by --quick (40 steps of at most 16 prompts, evaluated at
# 20 and 40 on 128 held-out problems), noise 0.1 and 0.4, one seed each (no seeds added), 16 screening prompts.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
short=0
out="$root/resources"
workspace=""
mismatch=""
while [ $# -gt 0 ]; do
  case "$1" in
    --short) short=1; shift ;;
    --out) out="$2"; shift 2 ;;
    --workspace) workspace="$2"; shift 2 ;;
    --mismatch) mismatch="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "remake.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$mismatch" ]; then
  (cd "$root" && cmake --preset release >/dev/null && cmake --build build/release --target mismatch)
  mismatch="$root/build/release/app/mismatch"
fi
if [ -z "$workspace" ]; then
  workspace="$(mktemp -d "${TMPDIR:-/tmp}/remake-calibration.XXXXXX")"
elif [ -e "$workspace/workspace.db" ]; then
  echo "remake.sh: $workspace already holds a workspace; give a new directory (the runs' ids must start at 1)" >&2
  exit 2
fi
mkdir -p "$out/calibrations"
echo "remake.sh: calibrating in $workspace with $mismatch" >&2
if [ $short -eq 1 ]; then
  target="$out/calibrations/arith-student-short.json"
  "$mismatch" --workspace "$workspace" --json calibrate "$root/resources/runs/demo-opd.yaml" --quick \
    --noise 0.1,0.4 --replicates 1 --max-replicates 1 --probe-count 16 > "$target.tmp"
  mv "$target.tmp" "$target"
  echo "remake.sh: wrote $target" >&2
  exit 0
fi
target="$out/calibrations/arith-student.json"
"$mismatch" --workspace "$workspace" --json calibrate "$root/resources/runs/demo-opd.yaml" \
  --noise 0.1,0.2,0.3,0.4 --replicates 2 > "$target.tmp"
# The baseline's first seed, its checkpoint at step 100 (the optimizer state left out). In a new workspace the
# calibration is run 1 and its first sweep run, the baseline's first seed, run 2.
checkpoint="$workspace/checkpoints/run-2/step-00000100"
grep -q '"label": "baseline"' "$target.tmp"
model="$out/models/arith-student-step100"
rm -rf "$model.tmp"
mkdir -p "$model.tmp"
for file in config.json model.safetensors tokenizer.json state.json; do
  cp "$checkpoint/$file" "$model.tmp/$file"
done
rm -rf "$model"
mv "$model.tmp" "$model"
mv "$target.tmp" "$target"
echo "remake.sh: wrote $target and $model (from $checkpoint)" >&2
