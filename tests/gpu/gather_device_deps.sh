#!/usr/bin/env bash
# The device build kit: on a Debian/Ubuntu machine with apt and network (the CPU machine), downloads the C++
# libraries the headless build needs as Debian packages and unpacks them into DIR (default .device-deps/ in the
# repository root, git-ignored), so that a GPU machine without them (and without a package registry) can build
# `mismatch` and the gpu tests against them: tests/gpu/run_on_device.sh uses DIR when present. Carry it with the
# device tool (`carry: [".device-deps"]`).
#
#   tests/gpu/gather_device_deps.sh [DIR]
#
# Packages: libsqlite3-dev + libsqlite3-0, libyaml-cpp-dev + its runtime (libyaml-cppX.Y, read from
# `apt-cache depends`), libpcre2-dev + libpcre2-8-0, libcli11-dev, nlohmann-json3-dev. ICU is left out
# (libicu72 alone is 35 MiB installed): the device build is configured with -DMISMATCH_ICU=OFF, so tokenizers
# with an NFC normalizer are refused there with a clear error. Kept: headers, shared libraries (relative links),
# CMake package files, pkg-config files (made relocatable with ${pcfiledir}) and the copyright files; removed:
# static libraries, docs, man pages, programs and PCRE2's 16/32-bit and POSIX parts (not needed by the build).
# Their own runtime needs (libc6, libstdc++6, libgcc-s1) are on every machine with a C++ compiler.
#
# Exit codes: 0 kit written (its size printed last), 2 apt cannot reach its archive or has no package lists
# (nothing to gather here; tests report that as skipped), 1 anything else.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=${1:-$root/.device-deps}
limit_mib=${MISMATCH_KIT_LIMIT_MIB:-24} # the kit, the ~11 MB working tree and carried wheels share 64 MiB
log() { printf '[gather_device_deps] %s\n' "$*"; }
unreachable() { log "$*"; exit 2; }

command -v apt-get >/dev/null && command -v apt-cache >/dev/null && command -v dpkg-deb >/dev/null \
  || unreachable "no apt-get/apt-cache/dpkg-deb on this machine: run this on a Debian or Ubuntu machine"

dev_packages=(libsqlite3-dev libyaml-cpp-dev libpcre2-dev libcli11-dev nlohmann-json3-dev)
# Without package lists apt knows none of them (a machine that never ran apt-get update, or CI): nothing to gather.
known=0
for p in "${dev_packages[@]}"; do
  apt-cache show "$p" >/dev/null 2>&1 && known=$((known + 1))
done
[ "$known" -gt 0 ] || unreachable "apt knows none of ${dev_packages[*]} (no package lists: apt-get update?)"
[ "$known" -eq "${#dev_packages[@]}" ] || {
  log "apt knows only $known of ${dev_packages[*]}: a package was renamed in this release?"; exit 1; }

# The runtime halves. yaml-cpp's carries its soname in its name (libyaml-cpp0.7, 0.8, ...): read it.
yaml_runtime=$(apt-cache depends libyaml-cpp-dev | awk '$1 == "Depends:" && $2 ~ /^libyaml-cpp[0-9]/ {print $2; exit}')
[ -n "$yaml_runtime" ] || { log "cannot read libyaml-cpp-dev's runtime package from apt-cache depends"; exit 1; }
packages=("${dev_packages[@]}" libsqlite3-0 "$yaml_runtime" libpcre2-8-0)

debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
log "downloading ${packages[*]}"
if ! (cd "$debs" && apt-get -o Acquire::Retries=0 -o Acquire::http::Timeout=20 -o Acquire::https::Timeout=20 \
    download "${packages[@]}") >"$debs/download.log" 2>&1; then
  cat "$debs/download.log" >&2
  offline="Could not resolve|Failed to fetch|Temporary failure|Connection (failed|timed out|refused)"
  if grep -qiE "$offline|Unable to connect|Network is unreachable" "$debs/download.log"; then
    unreachable "apt cannot reach its archive (no network?)"
  fi
  log "apt-get download failed"; exit 1
fi

# DIR is replaced whole: refuse a folder that holds something other than an earlier kit.
if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/PACKAGES" ]; then
  log "$dir exists and is not a kit (no PACKAGES file): not replacing it"; exit 1
fi
rm -rf "$dir"
mkdir -p "$dir"
for deb in "$debs"/*.deb; do
  dpkg-deb -x "$deb" "$dir"
  dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb" >>"$dir/PACKAGES"
done

# Prune what a build never reads.
usr=$dir/usr
find "$usr/share/doc" -type f ! -name copyright -delete
rm -rf "$usr/share/man" "$usr/bin" "$usr/share/lintian"
find "$usr/lib" -name '*.a' -delete
rm -f "$usr/include/pcre2posix.h" "$usr/include/sqlite3ext.h"
find "$usr/lib" -name '*pcre2-16*' -delete -o -name '*pcre2-32*' -delete -o -name '*pcre2-posix*' -delete
find "$dir" -depth -type d -empty -delete

# Links must stay inside the kit and resolve (they travel as links).
while IFS= read -r link; do
  target=$(readlink "$link")
  case "$target" in
    /*) ln -sfn "$(realpath --relative-to="$(dirname "$link")" "$dir$target")" "$link" ;;
  esac
  [ -e "$link" ] || { log "dangling link in the kit: $link -> $(readlink "$link")"; exit 1; }
done < <(find "$dir" -type l)

# pkg-config files say prefix=/usr; make them point into the kit wherever it lies.
while IFS= read -r pc; do
  rel=$(realpath --relative-to="$(dirname "$pc")" "$usr")
  sed -i "s|^prefix=/usr\$|prefix=\${pcfiledir}/$rel|" "$pc"
done < <(find "$dir" -name '*.pc')

# The highest glibc / libstdc++ symbol versions the kit's libraries need: the GPU machine's must be at least these.
if command -v objdump >/dev/null; then
  needs=$(find "$usr/lib" -name '*.so.*' -type f -exec objdump -T {} + 2>/dev/null \
    | grep -oE '(GLIBC|GLIBCXX|CXXABI)_[0-9.]+' | sort -t_ -k1,1 -k2,2V -u \
    | awk -F_ '{max[$1] = $0} END {for (k in max) printf "%s ", max[k]}')
  log "its libraries need at most: ${needs:-nothing versioned}"
fi

sed 's/^/  /' "$dir/PACKAGES"
size_kib=$(du -sk "$dir" | cut -f1)
files=$(find "$dir" -type f | wc -l)
log "kit: $dir, $files files, $((size_kib / 1024)).$(((size_kib % 1024) * 10 / 1024)) MiB"
if [ "$size_kib" -gt $((limit_mib * 1024)) ]; then
  log "the kit is over its ${limit_mib} MiB budget"; exit 1
fi
