#!/usr/bin/env bash
# Builds the Debian package of a build directory with CPack and checks it from the outside: unpacked into a
# temporary root, its `mismatch` must run and find the demo models and prompt sets inside that root (not in
# the source tree), and the desktop entry, AppStream metainfo, icon, man page and completions must be there.
# usage: packaging/test_package.sh BUILD_DIR        exits non-zero on the first failure
set -euo pipefail
build="$(cd "${1:?usage: packaging/test_package.sh BUILD_DIR}" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_package: FAIL: $*" >&2; exit 1; }
note() { echo "test_package: $*" >&2; }

cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
version="$(cache_value CMAKE_PROJECT_VERSION)"
source_dir="$(cache_value CMAKE_HOME_DIRECTORY)"
[ -n "$version" ] && [ -d "$source_dir" ] || fail "$build is not a configured build directory"
gui=0
[ "$(cache_value MISMATCH_BUILD_GUI)" = "ON" ] && gui=1

# 1. The package. -B keeps CPack's staging area and the .deb out of the build directory.
note "cpack -G DEB ($build)"
(cd "$build" && cpack -G DEB -B "$tmp/cpack") > "$tmp/cpack.log" 2>&1 || { cat "$tmp/cpack.log" >&2; fail "cpack failed"; }
deb="$tmp/cpack/mismatch-lab_${version}_$(dpkg --print-architecture).deb"
[ -f "$deb" ] || { ls "$tmp/cpack" >&2; fail "no $(basename "$deb")"; }
dpkg-deb --info "$deb" > "$tmp/info"
dpkg-deb --contents "$deb" | awk '{ print $NF }' | sed 's|^\./|/|' > "$tmp/contents"
grep -q '^ Depends:.*libtorch' "$tmp/info" || { cat "$tmp/info" >&2; fail "Depends does not name the LibTorch runtime"; }

expect=(
  /usr/bin/mismatch
  /usr/share/bash-completion/completions/mismatch
  /usr/share/zsh/vendor-completions/_mismatch
  /usr/share/man/man1/mismatch.1.gz
)
if [ "$gui" = 1 ]; then
  expect+=(
    /usr/bin/mismatch-lab
    /usr/share/applications/mismatch-lab.desktop
    /usr/share/metainfo/io.github.mismatchlab.MismatchLab.metainfo.xml
    /usr/share/icons/hicolor/scalable/apps/mismatch-lab.svg
  )
fi
# Every resource file of the source tree (demo models, prompt sets, recipes, icons)
while IFS= read -r f; do
  expect+=("/usr/share/mismatch-lab/resources/${f#./}")
done < <(cd "$source_dir/resources" && find . -type f | sort)
for path in "${expect[@]}"; do
  grep -qxF "$path" "$tmp/contents" || fail "$path is not in the package"
done
note "package holds the ${#expect[@]} expected files ($(wc -l < "$tmp/contents") entries)"

# 2. The unpacked package runs on its own resources.
root="$tmp/root"
dpkg-deb -x "$deb" "$root"
mismatch=(env -u MISMATCH_RESOURCE_DIR -u MISMATCH_WORKSPACE "$root/usr/bin/mismatch")
"${mismatch[@]}" --version > "$tmp/version" || fail "mismatch --version failed"
grep -q "^mismatch $version" "$tmp/version" || { cat "$tmp/version" >&2; fail "--version does not print mismatch $version"; }
"${mismatch[@]}" --workspace "$tmp/workspace" demo > "$tmp/demo" 2> "$tmp/demo.err" \
  || { cat "$tmp/demo" "$tmp/demo.err" >&2; fail "mismatch demo failed"; }
resources="$root/usr/share/mismatch-lab/resources"
for name in models/arith-teacher models/arith-student prompts/arith-heldout.jsonl; do
  grep -qF "$resources/$name" "$tmp/demo" || { cat "$tmp/demo" >&2; fail "demo does not list $resources/$name"; }
done
# The shipped calibration's line quotes the command that made it, as recorded (absolute paths of the machine and
# checkout it was made in; resources/calibrations/README.md): provenance, not a file the demo reads, so it is left
# out of this check (it would match whenever the source tree sits where that checkout was).
if grep -v "^budget: the shipped calibration (" "$tmp/demo" | grep -qF "$source_dir/resources"; then
  cat "$tmp/demo" >&2
  fail "demo used the source tree's resources"
fi
[ -f "$tmp/workspace/workspace.db" ] || fail "demo wrote no $tmp/workspace/workspace.db"
note "unpacked mismatch runs the demo on $resources"

# 3. Desktop integration
if [ "$gui" = 1 ]; then
  if command -v desktop-file-validate > /dev/null; then
    desktop-file-validate "$root/usr/share/applications/mismatch-lab.desktop" || fail "desktop-file-validate"
  else
    note "desktop-file-validate not installed (desktop-file-utils): .desktop file not validated"
  fi
  if command -v appstreamcli > /dev/null; then
    appstreamcli validate --no-net "$root/usr/share/metainfo/io.github.mismatchlab.MismatchLab.metainfo.xml" > "$tmp/appstream" 2>&1 \
      || { cat "$tmp/appstream" >&2; fail "appstreamcli validate"; }
  else
    note "appstreamcli not installed (appstream): metainfo not validated"
  fi
fi

# 4. Man page and completions cover every command of the installed program
gzip -t "$root/usr/share/man/man1/mismatch.1.gz" || fail "mismatch.1.gz is not gzip"
zcat "$root/usr/share/man/man1/mismatch.1.gz" > "$tmp/mismatch.1"
grep -q '^\.TH MISMATCH 1' "$tmp/mismatch.1" || fail "mismatch.1 has no .TH header"
if command -v man > /dev/null; then
  man --warnings -l "$tmp/mismatch.1" 2>&1 > /dev/null | tee "$tmp/man.warnings" >&2
  [ ! -s "$tmp/man.warnings" ] || fail "man reports warnings on mismatch.1"
fi
commands=($("${mismatch[@]}" --help | awk '/^Subcommands:/ { s = 1; next } s && /^  [^ ]/ { print $1 }'))
[ ${#commands[@]} -gt 0 ] || fail "no subcommands in mismatch --help"
bash_completion="$root/usr/share/bash-completion/completions/mismatch"
zsh_completion="$root/usr/share/zsh/vendor-completions/_mismatch"
# What bash offers after "mismatch " (sourcing the installed completion, as bash-completion does)
offered="$(bash -c 'source "$1" && COMP_WORDS=(mismatch "") && COMP_CWORD=1 && _mismatch && echo "${COMPREPLY[*]}"' _ "$bash_completion")"
for c in "${commands[@]}"; do
  grep -qF ".SS \"mismatch ${c//-/\\-}\"" "$tmp/mismatch.1" || fail "man page has no section for '$c'"
  [[ " $offered " == *" $c "* ]] || fail "bash completion does not offer '$c' (offers: $offered)"
  grep -q "^        '$c:" "$zsh_completion" || fail "zsh completion does not offer '$c'"
done
if command -v zsh > /dev/null; then
  zsh -n "$zsh_completion" || fail "zsh completion has syntax errors"
fi
note "man page and completions cover ${#commands[@]} commands: ${commands[*]}"

echo "test_package: OK: $(basename "$deb")"
