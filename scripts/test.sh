#!/usr/bin/env bash
# Build gattn and run its whole test suite with ctest (fresh Debian 12 machine, as root):
#
#   scripts/test.sh
#
# Installs missing Debian packages (scripts/install-deps.sh), configures build/ (Release,
# GATTN_SIMD=native), builds with -j$(nproc), runs `ctest --output-on-failure` (the gtest suite
# gattn_tests plus the install/consumer check `install.consumer`) and prints a summary.
# Exits non-zero on any failure.
#
# Environment (all optional; CI uses them for its extra builds):
#   GATTN_BUILD_DIR       build directory                         (default: build)
#   GATTN_SIMD            native | avx512 | avx2 | scalar | neon   (default: native; with a
#                         toolchain file: the toolchain's default)
#   GATTN_SANITIZE        ON | OFF: ASan+UBSan build               (default: OFF)
#   GATTN_BUILD_TYPE      CMake build type   (default: Release; RelWithDebInfo when GATTN_SANITIZE=ON)
#   GATTN_TOOLCHAIN_FILE  CMake toolchain file, e.g. cmake/toolchains/aarch64-linux-gnu.cmake
#   GATTN_CMAKE_ARGS      extra configure arguments (word-split), e.g. "-DGATTN_BUILD_BENCH=OFF"
#   GATTN_CTEST_ARGS      extra ctest arguments (word-split), e.g. "-E ^install\."
#   GATTN_JOBS            parallel build/test jobs                 (default: nproc)
#   GATTN_CTEST_TIMEOUT   per-test timeout in seconds              (default: 900)
#   GATTN_SWEEP           full | reduced | small: shape sweep size, read by the tests (default: full)
#   GATTN_SKIP_DEPS=1     do not run scripts/install-deps.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

build_dir="${GATTN_BUILD_DIR:-build}"
sanitize="${GATTN_SANITIZE:-OFF}"
case "${sanitize^^}" in ON|1|TRUE|YES) sanitize=ON ;; *) sanitize=OFF ;; esac
if [ "$sanitize" = ON ]; then build_type="${GATTN_BUILD_TYPE:-RelWithDebInfo}"; else build_type="${GATTN_BUILD_TYPE:-Release}"; fi
toolchain="${GATTN_TOOLCHAIN_FILE:-}"
jobs="${GATTN_JOBS:-$(nproc 2>/dev/null || echo 2)}"
timeout="${GATTN_CTEST_TIMEOUT:-900}"
read -r -a extra_cmake <<<"${GATTN_CMAKE_ARGS:-}"
read -r -a extra_ctest <<<"${GATTN_CTEST_ARGS:-}"

now() { date +%s; }
t0=$(now)

if [ "${GATTN_SKIP_DEPS:-0}" != 1 ]; then
  deps_args=()
  [ -n "$toolchain" ] && deps_args+=(--cross)
  bash "$root/scripts/install-deps.sh" "${deps_args[@]}"
fi
td=$(now)

cfg=(-S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE="$build_type" -DGATTN_SANITIZE="$sanitize" -DGATTN_BUILD_TESTS=ON)
if [ -n "$toolchain" ]; then
  case "$toolchain" in /*) ;; *) toolchain="$root/$toolchain" ;; esac
  cfg+=(-DCMAKE_TOOLCHAIN_FILE="$toolchain")
  [ -n "${GATTN_SIMD:-}" ] && cfg+=(-DGATTN_SIMD="$GATTN_SIMD")
else
  cfg+=(-DGATTN_SIMD="${GATTN_SIMD:-native}")
fi
cfg+=("${extra_cmake[@]}")

simd_desc="${GATTN_SIMD:-native}"
[ -n "$toolchain" ] && [ -z "${GATTN_SIMD:-}" ] && simd_desc="toolchain default"
echo "== gattn test: build_dir=$build_dir simd=$simd_desc sanitize=$sanitize type=$build_type" \
     "toolchain=${toolchain:-none} sweep=${GATTN_SWEEP:-full} jobs=$jobs"
cmake "${cfg[@]}"
t1=$(now)
cmake --build "$build_dir" -j "$jobs"
t2=$(now)

junit="$(cd "$build_dir" && pwd)/ctest-junit.xml"
rm -f "$junit"
set +e
(cd "$build_dir" && ctest --output-on-failure --no-tests=error -j "$jobs" --timeout "$timeout" \
   --output-junit "$junit" "${extra_ctest[@]}")
rc=$?
set -e
t3=$(now)

# Summary (from ctest's JUnit report: every gtest case is one ctest test, plus install.consumer).
if [ -f "$junit" ]; then
  head=$(head -c 1000 "$junit" | tr '\n\t' '  ' | grep -o '<testsuite [^>]*>' | head -n1 || true)
  attr() { sed -n "s/.* $1=\"\([^\"]*\)\".*/\1/p" <<<"$head"; }
  echo "== gattn test summary ($build_dir): $(attr tests) tests, $(attr failures) failed," \
       "$(attr skipped) skipped, $(attr disabled) disabled"
fi
echo "== gattn test times ($build_dir): deps $((td - t0))s, configure $((t1 - td))s, build $((t2 - t1))s, ctest $((t3 - t2))s, total $((t3 - t0))s"
if [ "$rc" -ne 0 ]; then
  echo "== gattn test: FAILED (ctest exit $rc)" >&2
else
  echo "== gattn test: PASSED"
fi
exit "$rc"
