#!/usr/bin/env bash
# Runs the prefill S-sweep of gattn_bench (JSON) and draws GFLOP/s vs T for plain, g1_elementwise
# and unfused with gnuplot. Usage: scripts/plot_bench.sh [build-dir] [threads] [out.png]
set -euo pipefail
build=${1:-build}
threads=${2:-1}
png=${3:-bench_sweep_t${threads}.png}
here=$(cd "$(dirname "$0")" && pwd)
json=$(mktemp --suffix=.json)
dat=$(mktemp --suffix=.dat)
trap 'rm -f "$json" "$dat"' EXIT
"$build/bench/gattn_bench" \
  --benchmark_filter="kernel/S[0-9]+/(plain|g1_elementwise|unfused)/t:${threads}(/real_time)?\$" \
  --benchmark_repetitions="${REPS:-5}" --benchmark_report_aggregates_only=true \
  --benchmark_format=json >"$json"
# Table: T plain g1_elementwise unfused (medians of GFLOPS).
python3 - "$json" >"$dat" <<'PY'
import json, re, sys
rows = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    m = re.match(r"kernel/S(\d+)/(\w+)/t:\d+", b["run_name"])
    if m:
        rows.setdefault(int(m.group(1)), {})[m.group(2)] = b["GFLOPS"] / 1e9 if b["GFLOPS"] > 1e6 else b["GFLOPS"]
print("# T plain g1_elementwise unfused")
for t in sorted(rows):
    r = rows[t]
    print(t, *(r.get(k, "nan") for k in ("plain", "g1_elementwise", "unfused")))
PY
gnuplot -e "datafile='$dat'; outfile='$png'; threads='$threads'" "$here/plot_bench.gp"
echo "wrote $png"
cat "$dat"
