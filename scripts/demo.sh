#!/usr/bin/env bash
# Build and run the gattn demo (fresh Debian 12 machine, as root):
#
#   scripts/demo.sh [demo arguments...]
#
# Installs missing Debian packages, configures build/ (Release, GATTN_SIMD=native; same settings as
# scripts/test.sh, so the two share one build directory), builds only the target gattn_demo and runs
# ./build/examples/gattn_demo with the given arguments.
# Environment: GATTN_BUILD_DIR (default build), GATTN_SIMD (default native), GATTN_JOBS (default
# nproc), GATTN_SKIP_DEPS=1.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build_dir="${GATTN_BUILD_DIR:-build}"
jobs="${GATTN_JOBS:-$(nproc 2>/dev/null || echo 2)}"

if [ "${GATTN_SKIP_DEPS:-0}" != 1 ]; then
  bash "$root/scripts/install-deps.sh"
fi
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE="${GATTN_BUILD_TYPE:-Release}" \
  -DGATTN_SIMD="${GATTN_SIMD:-native}" -DGATTN_SANITIZE=OFF >/dev/null
cmake --build "$build_dir" -j "$jobs" --target gattn_demo
case "$build_dir" in /*) ;; *) build_dir="./$build_dir" ;; esac
exec "$build_dir/examples/gattn_demo" "$@"
