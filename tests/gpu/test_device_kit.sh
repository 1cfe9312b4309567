#!/usr/bin/env bash
# The device build kit's CPU-side part (label unit): gathers a fresh kit with tests/gpu/gather_device_deps.sh into
# WORK/kit, checks what it holds, then configures tests/gpu/kit_probe against it with the system prefixes
# ignored (CMAKE_IGNORE_PREFIX_PATH=/usr;/usr/local) and pkg-config disabled, so that SQLite3, yaml-cpp, PCRE2,
# CLI11 and nlohmann_json can only come from the kit; builds the probe, checks from the compiler's dependency file
# that every header came from the kit and from ldd that every library resolves into it without LD_LIBRARY_PATH,
# and runs it.
# Exit 77 (skipped) when apt cannot reach its archive (CI has no network).
#
#   tests/gpu/test_device_kit.sh WORK
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(realpath -m "${1:?usage: test_device_kit.sh WORK}")
kit=$work/kit
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

rm -rf "$work"
mkdir -p "$work"
"$root/tests/gpu/gather_device_deps.sh" "$kit"
rc=$?
if [ "$rc" -eq 2 ]; then
  echo "SKIP: apt cannot gather the kit on this machine (no network or no package lists)"
  exit 77
fi
[ "$rc" -eq 0 ] || { echo "FAIL: gather_device_deps.sh exited $rc"; exit 1; }

# What the kit holds: the five libraries' headers, three shared libraries, their CMake packages; no static
# libraries, man pages or docs besides copyright files; links inside the kit.
for header in sqlite3.h pcre2.h yaml-cpp/yaml.h CLI/CLI.hpp nlohmann/json.hpp; do
  [ -f "$kit/usr/include/$header" ] || fail "no $header in the kit"
done
for lib in libsqlite3.so libyaml-cpp.so libpcre2-8.so; do
  [ -e "$kit/usr/lib/x86_64-linux-gnu/$lib" ] || fail "no $lib in the kit"
done
[ -z "$(find "$kit" -name '*.a')" ] || fail "static libraries left in the kit"
[ ! -e "$kit/usr/share/man" ] || fail "man pages left in the kit"
[ -z "$(find "$kit/usr/share/doc" -type f ! -name copyright 2>/dev/null)" ] || fail "docs left in the kit"
[ -z "$(find "$kit" -lname '/*')" ] || fail "absolute links in the kit"
[ -z "$(find -L "$kit" -type l)" ] || fail "dangling links in the kit"
grep -q '^prefix=/usr$' -r "$kit" --include='*.pc' && fail "a pkg-config file still says prefix=/usr"

# The probe, with the system's copies out of reach and without pkg-config (GPU machines may have none).
# Unix Makefiles keeps the compiler's dependency file (Ninja consumes it), which says where each header came from.
cmake -S "$root/tests/gpu/kit_probe" -B "$work/probe" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$kit/usr" "-DCMAKE_IGNORE_PREFIX_PATH=/usr;/usr/local" \
  -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON >"$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; echo "FAIL: the probe does not configure against the kit alone"; exit 1; }
grep -- "-- Library " "$work/configure.log"
for name in SQLite3 yaml-cpp PCRE2 CLI11 nlohmann_json; do
  grep -- "-- Library $name: " "$work/configure.log" | grep -qF "$kit/usr/" || fail "$name not found in the kit"
done
cmake --build "$work/probe" >"$work/build.log" 2>&1 || { cat "$work/build.log"; echo "FAIL: the probe does not build"; exit 1; }
depfile=$(find "$work/probe" -name 'kit_probe.cpp.o.d' | head -n 1)
[ -n "$depfile" ] || fail "no dependency file for kit_probe.cpp"
# One path per line, made absolute (ccache with a base_dir writes paths relative to the build folder).
headers=$(cd "$work/probe" && tr -s ' \\' '\n\n' <"$depfile" | grep -v ':$' | grep . | xargs realpath -m)
kit_real=$(realpath "$kit")
for header in sqlite3.h pcre2.h yaml-cpp/yaml.h CLI/CLI.hpp nlohmann/json.hpp; do
  grep -qxF "$kit_real/usr/include/$header" <<<"$headers" || fail "$header not read from the kit"
  grep -qE "^/usr(/local)?/include/$header\$" <<<"$headers" && fail "$header read from the system"
done
ldd "$work/probe/kit_probe" | grep -E "sqlite3|yaml-cpp|pcre2"
for lib in libsqlite3.so libyaml-cpp.so libpcre2-8.so; do
  ldd "$work/probe/kit_probe" | grep -F "$lib" | grep -qF "$kit/usr/lib/" || fail "$lib does not resolve into the kit"
done
"$work/probe/kit_probe" --count 3 || fail "the probe's checks"

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "the kit alone builds and runs the probe"
