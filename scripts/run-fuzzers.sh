#!/usr/bin/env bash
# Builds every libFuzzer target with clang and runs each over a copy of its seed corpus for
# FUZZ_SECONDS seconds (default 60). Exits non-zero on a build failure or a crash.
#   usage: scripts/run-fuzzers.sh [BUILD_DIR]     (default: build-fuzz)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-60}"
jobs="${FUZZ_JOBS:-$(nproc)}"

CC="${CC:-clang}" CXX="${CXX:-clang++}" cmake -S "$root" -B "$build" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGATTN_BUILD_FUZZERS=ON -DGATTN_BUILD_TESTS=OFF \
  -DGATTN_BUILD_BENCH=OFF -DGATTN_BUILD_EXAMPLES=OFF -DGATTN_BUILD_CLI=OFF -DGATTN_OPENMP=OFF
cmake --build "$build" --parallel "$jobs"

status=0
for fuzzer in "$build"/fuzz/fuzz_*; do
  [[ -x "$fuzzer" && -f "$fuzzer" ]] || continue
  name="$(basename "$fuzzer")"
  seeds="$root/fuzz/corpus/${name#fuzz_}"
  # Fuzz a copy: libFuzzer adds every new input to its first corpus directory, and the committed
  # seeds should stay small and reviewed.
  work="$build/fuzz-run/$name"
  rm -rf "$work" && mkdir -p "$work/corpus" "$work/artifacts"
  if [[ -d "$seeds" ]]; then cp -r "$seeds/." "$work/corpus/"; fi
  echo "== $name: ${seconds}s over $(ls "$work/corpus" | wc -l) seeds"
  if ! "$fuzzer" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
      "$work/corpus"; then
    echo "!! $name failed; reproducer(s) in $work/artifacts/:" >&2
    ls -l "$work/artifacts" >&2 || true
    status=1
  fi
done
exit "$status"
