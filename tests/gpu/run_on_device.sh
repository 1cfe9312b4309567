#!/usr/bin/env bash
# Builds core, cuda/ and the CLI against the LibTorch inside the machine's PyTorch (the system LibTorch when
# python3 has no torch), GUI off and Qt not required; runs the `gpu` tests; then the device benchmark, which
# writes ONE JSON file, $OUT/gpu-bench.json (OUT defaults to ./gpu-out; the gpu tests' log goes beside it as
# gpu-tests.log), and prints a short table last.
#
#   tests/gpu/run_on_device.sh [BUILD_DIR]        run from the repository root; BUILD_DIR defaults to build/gpu
#
# Sections: FP8 vs BF16 cuBLASLt GEMM (TFLOP/s), fused KL vs unfused LibTorch (GB/s against the copy bandwidth),
# KV capacity FP8/BF16 from the engine's allocator (7B shape), synthetic 7B decode tokens/s BF16 vs FP8, and time
# to quality of synchronous BF16 vs asynchronous FP8 training on the demo pair through `mismatch train` (skipped
# with a message when this CLI has no `train` command). Sized for <= 8 minutes on one H200 with 16 cores.
# Without a CUDA device (or with a CPU-only LibTorch) it stops after the build, before anything needs the GPU,
# and exits 0 saying so. MISMATCH_GPU_QUICK=1 shrinks every benchmark (a smoke run).
#
# The device build kit: GPU machines have none of the C++ libraries (SQLite, yaml-cpp, PCRE2, CLI11, nlohmann-json)
# and no package registry. When .device-deps/ (or MISMATCH_DEVICE_DEPS) holds the kit that
# tests/gpu/gather_device_deps.sh made on a CPU machine, it goes first on CMAKE_PREFIX_PATH and LD_LIBRARY_PATH
# (the binaries also carry its library folder as their run path). Without ICU headers (the kit has none) the build
# is configured with -DMISMATCH_ICU=OFF: tokenizers with an NFC normalizer are then refused with a clear error.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build/gpu}
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out" "$build"
started=$SECONDS
log() { printf '[run_on_device %3ds] %s\n' "$((SECONDS - started))" "$*"; }

# 1. LibTorch: PyTorch's bundled one when importable (a CUDA build on GPU machines), else the system one.
prefix=""
if prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) && [ -n "$prefix" ]; then
  log "LibTorch from PyTorch $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null) at $prefix"
else
  prefix=""
  log "python3 has no torch: building against the system LibTorch (CPU-only on Debian)"
fi

# 2. The device build kit, when there is one, and ICU.
prefix_path=$prefix
kit=${MISMATCH_DEVICE_DEPS:-$root/.device-deps}
if [ -d "$kit/usr/include" ]; then
  kit_lib=$kit/usr/lib/x86_64-linux-gnu
  prefix_path="$kit/usr${prefix_path:+;$prefix_path}"
  export LD_LIBRARY_PATH="$kit_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  log "device build kit at $kit ($(du -sh "$kit" | cut -f1)): $(paste -sd, "$kit/PACKAGES" 2>/dev/null)"
  # Debian's libraries use the C++11 string ABI; a LibTorch built with the old one could not link yaml-cpp's API.
  if [ -n "$prefix" ] && [ "$(python3 -c 'import torch; print(torch.compiled_with_cxx11_abi())' 2>/dev/null)" = False ]; then
    log "warning: this LibTorch uses the pre-C++11 string ABI, the kit's yaml-cpp the C++11 one: linking may fail"
  fi
else
  log "no device build kit at $kit: the C++ libraries must be installed (tests/gpu/gather_device_deps.sh makes one)"
fi
icu=OFF
for include in /usr/include /usr/local/include "$kit/usr/include"; do
  [ -f "$include/unicode/unorm2.h" ] && icu=ON
done
[ "$icu" = ON ] || log "no ICU headers: -DMISMATCH_ICU=OFF (tokenizers with an NFC normalizer are refused)"

# 3. Configure and build (GUI off; Qt is optional then, and only the Qt-free tests are built).
cuda_option=-DMISMATCH_CUDA=ON
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  log "no nvcc: cuda/ cannot be built here"
  exit 1
fi
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMISMATCH_BUILD_GUI=OFF "$cuda_option" \
    -DMISMATCH_CUDA_RUNTIME=AUTO \
    "-DMISMATCH_TEST_DIRS=gpu;bench" -DMISMATCH_ICU="$icu" ${prefix_path:+"-DCMAKE_PREFIX_PATH=$prefix_path"} \
    >"$build/configure.log" 2>&1; then
  tail -n 30 "$build/configure.log"
  log "configure failed (a missing dependency? tests/gpu/gather_device_deps.sh gathers them); log: $build/configure.log"
  exit 1
fi
grep -E "Mismatch Lab|CUDA runtime|Qt 6 Test|-- Library |MISMATCH_ICU" "$build/configure.log" || true
grep -A4 "CMake Warning" "$build/configure.log" || true
log "building mismatch, test_gpu_reference, test_gpu_kernels, test_gpu_parity, bench_gpu, bench_model_shape"
# -k 0: on a failure the build goes on with everything else, so one run lists every file that does not compile.
if ! cmake --build "$build" -j"$(nproc)" --target mismatch test_gpu_reference test_gpu_kernels test_gpu_parity bench_gpu bench_model_shape -- -k 0 \
    >"$build/build.log" 2>&1; then
  grep -E "error:|Error [0-9]" "$build/build.log" | sort -u | head -n 60
  log "build failed; log: $build/build.log"
  exit 1
fi
log "build done"
# The programs must start (`--version` loads every library; it needs no device, so this catches the loader, not
# the GPU). Against a LibTorch with CUDA they link the shared CUDA runtime that LibTorch links (one runtime per
# process, CMakeLists.txt); should the loader refuse the toolkit's runtime there (say, one older than LibTorch's),
# the build goes back to the static runtime, with which LibTorch's own libcudart is the one loaded.
if ! "$build/app/mismatch" --version >"$build/start.log" 2>&1; then
  cat "$build/start.log"
  log "mismatch does not start with the shared CUDA runtime: rebuilding with -DMISMATCH_CUDA_RUNTIME=Static"
  if ! cmake "$build" -DMISMATCH_CUDA_RUNTIME=Static >>"$build/configure.log" 2>&1; then
    tail -n 20 "$build/configure.log"; log "reconfiguring failed"; exit 1
  fi
  if ! cmake --build "$build" -j"$(nproc)" --target mismatch test_gpu_reference test_gpu_kernels test_gpu_parity bench_gpu bench_model_shape \
      >>"$build/build.log" 2>&1; then
    grep -E "error:|Error [0-9]" "$build/build.log" | sort -u | head -n 30; log "rebuilding failed"; exit 1
  fi
  if ! "$build/app/mismatch" --version >"$build/start.log" 2>&1; then
    cat "$build/start.log"; log "mismatch does not start with the static CUDA runtime either"; exit 1
  fi
fi
head -n 3 "$build/start.log"

# 4. The always-running CPU reference tests, then the gpu tests (CTest reports exit code 77 as skipped: no
#    device, so stop before the GPU parts).
"$build/tests/gpu/test_gpu_reference" >"$build/test_gpu_reference.log" 2>&1 || {
  tail -n 20 "$build/test_gpu_reference.log"; log "test_gpu_reference FAILED"; exit 1; }
log "test_gpu_reference passed"
ctest --test-dir "$build" -L gpu -V >"$build/ctest_gpu.log" 2>&1
ctest_rc=$?
cp "$build/ctest_gpu.log" "$out/gpu-tests.log" # every check with its measured margin, beside the JSON
if grep -q "Skipped" "$build/ctest_gpu.log"; then
  grep -E "test_gpu|tests passed|Skipped" "$build/ctest_gpu.log"
  log "no CUDA device, or a LibTorch without CUDA: built and CPU-tested; stopping before the GPU tests and the benchmark"
  exit 0
fi
grep -E "FAIL|SegFault|Exception" "$build/ctest_gpu.log" || true
# Tests that crashed (not a failed check) are diagnosed last (step 9), after every figure below.
crashed_tests=$(grep -oE "test_gpu_[a-z_]+ \.+\*\*\*Exception" "$build/ctest_gpu.log" | cut -d' ' -f1)
if [ "$ctest_rc" -ne 0 ]; then
  log "gpu tests FAILED (log: $build/ctest_gpu.log); benchmarking anyway"
  gpu_tests=failed
else
  log "gpu tests passed"
  gpu_tests=passed
fi

# 5. Time to quality through the CLI: BF16 synchronous vs FP8 asynchronous on the demo pair.
ttq="$build/time-to-quality.json"
mismatch="$build/app/mismatch"
workspace="$build/ttq-workspace"
if ! "$mismatch" train --help >/dev/null 2>&1; then
  printf '{"skipped": "this mismatch CLI has no train command"}\n' >"$ttq"
  log "time to quality skipped: this CLI has no 'train' command"
else
  rm -rf "$workspace"
  ok=1
  for run in ttq-bf16-sync ttq-fp8-async; do
    log "mismatch train $run"
    if ! timeout 100 "$mismatch" --workspace "$workspace" --json train "$root/tests/gpu/$run.yaml" --quiet \
        >"$build/$run.train.json" 2>"$build/$run.train.log"; then
      tail -n 5 "$build/$run.train.log"; ok=0; break
    fi
    "$mismatch" --workspace "$workspace" --json runs show "$run" >"$build/$run.show.json" 2>>"$build/$run.train.log" || { ok=0; break; }
  done
  if [ "$ok" -eq 1 ]; then
    python3 "$root/tests/gpu/time_to_quality.py" "$build/ttq-bf16-sync.show.json" "$build/ttq-fp8-async.show.json" >"$ttq" \
      || printf '{"skipped": "could not read evaluations and wall times from runs show --json"}\n' >"$ttq"
  else
    printf '{"skipped": "mismatch train or runs show failed; see %s"}\n' "$build" >"$ttq"
  fi
fi

# 6. The benchmark: one JSON file, the table printed last.
quick=()
[ "${MISMATCH_GPU_QUICK:-0}" = 1 ] && quick=(--quick)
log "bench_gpu (gpu tests $gpu_tests)"
"$build/tests/gpu/bench_gpu" --out "$out/gpu-bench.json" --time-to-quality "$ttq" "${quick[@]}"
rc=$?

# 7. The whole engine at a real model's shape on the GPU (Qwen3-0.6B, random weights written by `zoo shape`):
#    BF16, FP8 W8A8 block-128, FP8 KV and FP32 engines against eager PyTorch on the same GPU, and the admission
#    check of six candidates (tests/bench/bench_model_shape.cpp). Last, and bounded, so that it cannot cost the
#    figures above; its table goes to the log and its JSON beside gpu-bench.json.
shape_args=(--batch 32 --prompt-tokens 64 --new-tokens 128 --admission-prompts 32 --admission-tokens 64)
[ "${MISMATCH_GPU_QUICK:-0}" = 1 ] && shape_args=(--batch 4 --prompt-tokens 16 --new-tokens 16 --admission-prompts 4 --admission-tokens 8)
log "bench_model_shape on cuda:0 (Qwen3-0.6B shape)"
if timeout "${MISMATCH_SHAPE_SECONDS:-150}" "$build/tests/bench/bench_model_shape" --shape qwen3-0.6b \
    --work "$build/shapes" --device cuda:0 --threads "$(nproc)" --baseline-seconds 20 "${shape_args[@]}" \
    --json "$out/model-shape.json" >"$build/model-shape.log" 2>&1; then
  grep -v '^bench_model_shape:' "$build/model-shape.log" | tail -n 40
else
  tail -n 15 "$build/model-shape.log"
  log "bench_model_shape failed or ran past its time (log: $build/model-shape.log)"
fi

# 8. Issue 22's 7-8B figure: the admission check of six candidates at 128 prompts x 128 tokens on a Qwen3-8B shape
#    (random weights written by `zoo shape`, ~16 GB on disk under the build directory; engines and the eager
#    baseline skipped; 64 prompts a batch). Bounded by MISMATCH_8B_SECONDS (default 300; 0 skips it), after everything else.
if [ "${MISMATCH_8B_SECONDS:-300}" -gt 0 ]; then
  log "bench_model_shape on cuda:0 (Qwen3-8B shape): six-candidate admission, 128 x 128"
  if timeout "${MISMATCH_8B_SECONDS:-300}" "$build/tests/bench/bench_model_shape" --shape qwen3-8b \
      --work "$build/shapes" --device cuda:0 --threads "$(nproc)" --skip-engines --skip-baseline \
      --admission-prompts 128 --admission-tokens 128 --admission-batch 64 --json "$out/model-shape-8b.json" >"$build/model-shape-8b.log" 2>&1; then
    grep -v '^bench_model_shape:' "$build/model-shape-8b.log" | tail -n 20
  else
    tail -n 15 "$build/model-shape-8b.log"
    log "the 7-8B admission check failed or ran past its time (log: $build/model-shape-8b.log)"
  fi
fi
# 9. A gpu test that crashed: once more with OMP_WAIT_POLICY=PASSIVE (`mismatch train` on cuda:0 exits cleanly, and
#    the one difference in how it runs is the environment it re-executes itself with, core/common/runtime.cpp: no
#    OpenMP thread spins at exit), then under cuda-gdb (the GPU image has no gdb) for a backtrace.
for crashed in $crashed_tests; do
  OMP_WAIT_POLICY=PASSIVE timeout 240 "$build/tests/gpu/$crashed" >"$out/$crashed-passive.log" 2>&1
  log "$crashed with OMP_WAIT_POLICY=PASSIVE: exit status $? (log: $out/$crashed-passive.log)"
  if command -v cuda-gdb >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/cuda-gdb ]; then
    log "$crashed crashed: backtrace under cuda-gdb (log: $out/$crashed-backtrace.log)"
    PATH="$PATH:/usr/local/cuda/bin" timeout 240 cuda-gdb -q -batch -ex run -ex bt -ex "info threads" \
      "$build/tests/gpu/$crashed" >"$out/$crashed-backtrace.log" 2>&1 || true
    grep -E "^#[0-9]+ |signal|Thread" "$out/$crashed-backtrace.log" | head -n 25
  fi
done
log "done in $((SECONDS - started)) s; JSON: $out/gpu-bench.json"
exit "$rc"
