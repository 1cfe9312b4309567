#!/usr/bin/env bash
# Runs the main job from a build directory: the GUI on the built-in demo pair when there is a display,
# the headless demo (`mismatch demo`) when there is none.
# usage: packaging/launch.sh BUILD_DIR [extra arguments for the program]
set -euo pipefail
build="${1:?usage: packaging/launch.sh BUILD_DIR}"
shift
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ -x "$build/app/mismatch-lab" ]; then
  exec "$build/app/mismatch-lab" "$@"
fi
echo "launch: no display; running the headless demo (mismatch demo)" >&2
exec "$build/app/mismatch" "$@" demo
