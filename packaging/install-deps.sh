#!/usr/bin/env bash
# Installs exactly the Debian 12 packages that Mismatch Lab needs to build, test and run.
# Idempotent and non-interactive: packages already present are left alone.
# Usage: packaging/install-deps.sh            (as root, or with sudo available)
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  # the `fuzz` preset (ASan + UBSan, libFuzzer targets) that CI builds after the test command
  clang libclang-rt-14-dev
  # core
  libtorch-dev libopenblas0-pthread libsqlite3-dev sqlite3
  libcli11-dev nlohmann-json3-dev libyaml-cpp-dev libpcre2-dev libicu-dev
  # GUI
  qt6-base-dev qt6-svg-dev libqcustomplot-dev libgl-dev
  # GUI tests and screenshots without a display
  xvfb xauth
  # the single-node Slurm cluster of the scale-out tests (tests/cluster/slurm_cluster.sh)
  slurmctld slurmd slurm-client munge
  # the .deb (cpack, dpkg-shlibdeps) and its checks (desktop file, AppStream metainfo, zsh completion)
  file dpkg-dev desktop-file-utils appstream zsh
)

# Node.js and npm fetch the reference tokenizer for the tokenizer tests (they skip without it). A machine that
# already has npm (e.g. from another Node.js distribution) keeps it: Debian's npm would conflict with it.
if ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present" >&2
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's default BLAS is the reference implementation; LibTorch's FP32 matmul is ~12x faster on OpenBLAS.
if [ -x /usr/sbin/update-alternatives ] && [ -e /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 ]; then
  $sudo update-alternatives --set libblas.so.3-x86_64-linux-gnu \
    /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 >/dev/null 2>&1 || true
  $sudo update-alternatives --set liblapack.so.3-x86_64-linux-gnu \
    /usr/lib/x86_64-linux-gnu/openblas-pthread/liblapack.so.3 >/dev/null 2>&1 || true
fi
echo "install-deps: done" >&2
