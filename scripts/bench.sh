#!/usr/bin/env bash
# Run the benchmarks behind the performance targets of docs/performance.md:
#
#   scripts/bench.sh OUT.json            # 5-10 minutes on the 2-core development VM, plus the build
#
# Builds gattn_bench in build/ (Release, GATTN_SIMD=native, the tree scripts/test.sh and
# scripts/demo.sh share), runs the machine limits and every benchmark a target names at
# t:1 and t:2, 5 repetitions randomly interleaved (the VM's speed drifts within minutes, so only
# ratios inside one run mean anything), writes Google Benchmark's JSON to OUT.json, then prints
# scripts/bench_report.py's tables and the targets of this run beside every run kept in docs/
# (docs/bench_results*.json).
# Environment: GATTN_BUILD_DIR (default build), GATTN_JOBS (default nproc), GATTN_SKIP_DEPS=1,
# GATTN_BENCH_FILTER (overrides the filter below).
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: scripts/bench.sh OUT.json" >&2
  exit 2
fi
out="$1"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${GATTN_BUILD_DIR:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
jobs="${GATTN_JOBS:-$(nproc 2>/dev/null || echo 2)}"

if [ "${GATTN_SKIP_DEPS:-0}" != 1 ]; then
  bash "$root/scripts/install-deps.sh"
fi
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DGATTN_SIMD="${GATTN_SIMD:-native}" \
  -DGATTN_SANITIZE=OFF >/dev/null
cmake --build "$build_dir" -j "$jobs" --target gattn_bench

filter='^(limits/(read|fma)/t:(1|2)|limits/D1(hot)?_floor/(f32|bf16)/t:(1|2)'
filter+='|kernel/D1hot/g1_elementwise(_bf16)?/t:1|kernel/(D1|M1)/g1_elementwise(_bf16|_f16|_bf16_fast)?/t:(1|2)'
filter+='|kernel/P1/g1_elementwise(_bf16)?/t:1|layer/L1D/g1_elementwise(_bf16)?/t:(1|2)'
filter+='|layer/BD(1|32)/g1_elementwise(_bf16)?/t:(1|2)|proj/gemm/(f32|bf16|f16)/n:(8|32|64)/t:1'
filter+='|ab/(P1|D1)/g1_elementwise_vs_plain/t:1)/'
"$build_dir/bench/gattn_bench" --benchmark_filter="${GATTN_BENCH_FILTER:-$filter}" \
  --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true --benchmark_min_time=0.1 \
  --benchmark_out="$out" --benchmark_out_format=json >/dev/null

python3 "$root/scripts/bench_report.py" "$out"
echo
python3 "$root/scripts/bench_report.py" --targets "$root"/docs/bench_results*.json "$out"
