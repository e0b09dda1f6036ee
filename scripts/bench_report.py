#!/usr/bin/env python3
"""Turns gattn_bench JSON (with repetitions) into tables: medians and the docs/performance.md ratios.

Usage: scripts/bench_report.py RESULTS.json > table.md
       scripts/bench_report.py --targets RUN1.json RUN2.json ...   (the performance targets, a column per run)

ab/<shape>/<gated>_vs_<plain>/t:<n> (bench_ab.cpp, the interleaved in-process A/B) report counters
rather than a time: their cells show the gated and plain medians and the paired overhead.
"""
import json
import re
import sys


# Counters of the ab/... benchmarks, kept as they are (medians over repetitions when aggregated).
AB_COUNTERS = ("overhead_pct", "gated_ms", "plain_ms", "pairs", "overhead_p25_pct", "overhead_p75_pct",
               "cpu_overhead_pct", "clean_pairs", "clean_overhead_pct")


def runs_of(path):
    """The runs a results file holds: itself, or its run1, run2, ... ({"note", "run1", ...})."""
    data = json.load(open(path))
    if "benchmarks" in data:
        return [data]
    return [data[k] for k in sorted(k for k in data if re.fullmatch(r"run\d+", k))]


def medians(path, data=None):
    if data is None:
        data = runs_of(path)[0]
    out = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = re.sub(r"/(real|manual)_time$", "", b["run_name"])
        ms = b["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
        out[name] = {"ms": ms, "GFLOPS": b.get("GFLOPS", 0) / 1e9 if b.get("GFLOPS", 0) > 1e6 else b.get("GFLOPS", 0),
                     "GBps": b.get("GBps", 0) / 1e9 if b.get("GBps", 0) > 1e6 else b.get("GBps", 0),
                     "label": b.get("label", "")}
        out[name].update({k: b[k] for k in AB_COUNTERS if k in b})
    return data.get("context", {}), out


def main():
    ctx, m = medians(sys.argv[1])
    def get(name, key):
        return m[name][key] if name in m else float("nan")
    print(f"Machine: {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz, "
          f"load average {ctx.get('load_avg', '?')}, {ctx.get('gattn_arch', '')}")
    print()
    print("| benchmark | t:1 | t:2 |")
    print("|---|---|---|")
    rows = sorted({re.sub(r"/t:\d+$", "", n) for n in m})
    for r in rows:
        cells = []
        for t in (1, 2):
            n = f"{r}/t:{t}"
            if n not in m:
                cells.append("")
                continue
            v = m[n]
            if "overhead_pct" in v:
                cells.append(f"gated {v['gated_ms']:.3g} ms, plain {v['plain_ms']:.3g} ms, "
                             f"paired {v['overhead_pct']:+.2f}% (quartiles {v.get('overhead_p25_pct', float('nan')):+.1f}% "
                             f"… {v.get('overhead_p75_pct', float('nan')):+.1f}%), "
                             f"CPU time {v.get('cpu_overhead_pct', float('nan')):+.2f}%, {v['pairs']:.0f} pairs")
                continue
            extra = f", {v['GFLOPS']:.1f} GFLOP/s" if v["GFLOPS"] else ""
            extra += f", {v['GBps']:.1f} GB/s" if v["GBps"] else ""
            cells.append(f"{v['ms']:.3g} ms{extra}")
        print(f"| {r} | {cells[0]} | {cells[1]} |")
    print()
    print("| ratio (same run, medians) | t:1 | t:2 | target |")
    print("|---|---|---|---|")
    def ratio_row(label, f, target, fmt=".2f"):
        vals = []
        for t in (1, 2):
            try:
                vals.append(f"{f(t):{fmt}}")
            except (KeyError, ZeroDivisionError):
                vals.append("—")
        print(f"| {label} | {vals[0]} | {vals[1]} | {target} |")
    def ab_rows(shape, target):
        # bench_ab.cpp: gated and plain calls alternated in one process; the median over pairs of
        # (t_gated − t_plain)/t_plain on the steady clock, then on process CPU time.
        ab = f"ab/{shape}/g1_elementwise_vs_plain"
        ratio_row(f"{shape} gate overhead, in-process A/B (median of paired differences)",
                  lambda t: get(f"{ab}/t:{t}", "overhead_pct") / 100, target, ".3f")
        ratio_row(f"{shape} gate overhead, in-process A/B on process CPU time",
                  lambda t: get(f"{ab}/t:{t}", "cpu_overhead_pct") / 100, "", ".3f")
    for shape in ("P1", "P2"):
        ratio_row(f"{shape} fused gated / unfused (speed)",
                  lambda t: get(f"kernel/{shape}/unfused/t:{t}", "ms") / get(f"kernel/{shape}/g1_elementwise/t:{t}", "ms"), "≥ 2")
        ratio_row(f"{shape} fused gated GFLOP/s / limits/gemm",
                  lambda t: get(f"kernel/{shape}/g1_elementwise/t:{t}", "GFLOPS") / get(f"limits/gemm/t:{t}", "GFLOPS"), "≥ 0.85")
        ratio_row(f"{shape} gate overhead (elementwise / plain − 1)",
                  lambda t: get(f"kernel/{shape}/g1_elementwise/t:{t}", "ms") / get(f"kernel/{shape}/plain/t:{t}", "ms") - 1, "≤ 0.01")
        if shape == "P1":
            ab_rows(shape, "≤ 0.01")
        ratio_row(f"{shape} fused gated GFLOP/s / limits/fma (FMA peak)",
                  lambda t: get(f"kernel/{shape}/g1_elementwise/t:{t}", "GFLOPS") / get(f"limits/fma/t:{t}", "GFLOPS"), "")
    for shape in ("D1", "M1"):
        ratio_row(f"{shape} fused gated GB/s / limits/read",
                  lambda t: get(f"kernel/{shape}/g1_elementwise/t:{t}", "GBps") / get(f"limits/read/t:{t}", "GBps"), "≥ 0.8")
        ratio_row(f"{shape} gate overhead (elementwise / plain − 1)",
                  lambda t: get(f"kernel/{shape}/g1_elementwise/t:{t}", "ms") / get(f"kernel/{shape}/plain/t:{t}", "ms") - 1, "≤ 0.03")
        if shape == "D1":
            ab_rows(shape, "≤ 0.03")
    ratio_row("D1 head-major cache view GB/s / limits/read",
              lambda t: get(f"kernel/D1/g1_elementwise_head_major/t:{t}", "GBps") / get(f"limits/read/t:{t}", "GBps"), "")
    # M1 is bounded by the FMA rate: 2·T·H·(d_qk + d_v) FLOP per call against limits/fma.
    m1_flop = 2.0 * 8192 * 16 * (576 + 512)
    ratio_row("M1 fused gated GFLOP/s / limits/fma (FMA peak)",
              lambda t: m1_flop / (get(f"kernel/M1/g1_elementwise/t:{t}", "ms") * 1e6) / get(f"limits/fma/t:{t}", "GFLOPS"), "")
    ratio_row("M1 best possible GB/s at limits/fma / limits/read",
              lambda t: get(f"limits/fma/t:{t}", "GFLOPS") * 1e9 / m1_flop * 8192 * 576 * 4 / 1e9 / get(f"limits/read/t:{t}", "GBps"), "")
    # docs/spec.md §10 low-precision caches (exact numerics): time against the fp32 cache of the same shape.
    def lp_time(shape, dtype, t):
        return get(f"kernel/{shape}/g1_elementwise_{dtype}/t:{t}", "ms") / get(f"kernel/{shape}/g1_elementwise/t:{t}", "ms")
    ratio_row("D1 bf16 / D1 fp32 time", lambda t: lp_time("D1", "bf16", t), "≤ 0.55")
    # limits/D1_floor (bench_kernel.cpp): D1's reads in address order with the kernel's FMAs and
    # nothing else; its bf16/fp32 ratio is as low as an exact kernel's can go on this machine.
    def floor(dtype, t):
        return get(f"limits/D1_floor/{dtype}/t:{t}", "ms")
    ratio_row("D1 floor bf16 / floor fp32 time (limits/D1_floor)", lambda t: floor("bf16", t) / floor("f32", t), "")
    ratio_row("D1 bf16 kernel / its floor", lambda t: get(f"kernel/D1/g1_elementwise_bf16/t:{t}", "ms") / floor("bf16", t), "")
    ratio_row("D1 fp32 kernel / its floor", lambda t: get(f"kernel/D1/g1_elementwise/t:{t}", "ms") / floor("f32", t), "")
    ratio_row("D1 f16 / D1 fp32 time", lambda t: lp_time("D1", "f16", t), "≤ 0.55")
    ratio_row("M1 bf16 / M1 fp32 time (exact numerics)", lambda t: lp_time("M1", "bf16", t), "≤ 0.9")
    ratio_row("M1 bf16 fast / M1 fp32 time (fast numerics: vdpbf16ps)", lambda t: lp_time("M1", "bf16_fast", t), "≤ 0.55")
    ratio_row("P1 bf16 cache / P1 fp32 time", lambda t: lp_time("P1", "bf16", t), "≤ 1.1")
    ratio_row("D1 f16 GB/s (bytes read) / limits/read",
              lambda t: get(f"kernel/D1/g1_elementwise_f16/t:{t}", "GBps") / get(f"limits/read/t:{t}", "GBps"), "")
    ratio_row("M1 bf16 fast GFLOP/s / limits/fma (FMA peak)",
              lambda t: m1_flop / (get(f"kernel/M1/g1_elementwise_bf16_fast/t:{t}", "ms") * 1e6) / get(f"limits/fma/t:{t}", "GFLOPS"), "")
    ratio_row("D1 bf16 GB/s (bytes read) / limits/read",
              lambda t: get(f"kernel/D1/g1_elementwise_bf16/t:{t}", "GBps") / get(f"limits/read/t:{t}", "GBps"), "")
    for shape in ("P1", "P2"):
        ratio_row(f"{shape} 2-thread speed-up (gated)",
                  lambda t: get(f"kernel/{shape}/g1_elementwise/t:1", "ms") / get(f"kernel/{shape}/g1_elementwise/t:2", "ms") if t == 2 else float("nan"), "≥ 1.8")


# The performance targets of docs/performance.md as (label, function of (medians, t), target, is_met).
def target_rows():
    def ms(m, name):
        return m[name]["ms"]
    def lp(shape, dtype):
        return lambda m, t: ms(m, f"kernel/{shape}/g1_elementwise_{dtype}/t:{t}") / ms(m, f"kernel/{shape}/g1_elementwise/t:{t}")
    at_most = lambda lim: (lambda v: v <= lim)
    return [
        ("D1 bf16 / fp32 time", lp("D1", "bf16"), "≤ 0.55", at_most(0.55)),
        ("M1 bf16 exact / fp32 time", lp("M1", "bf16"), "≤ 0.9", at_most(0.9)),
        ("M1 bf16 fast / fp32 time", lp("M1", "bf16_fast"), "≤ 0.55", at_most(0.55)),
        ("P1 bf16 / fp32 time", lp("P1", "bf16"), "≤ 1.1", at_most(1.1)),
        ("L1D bf16 / fp32 layer time",
         lambda m, t: ms(m, f"layer/L1D/g1_elementwise_bf16/t:{t}") / ms(m, f"layer/L1D/g1_elementwise/t:{t}"), "≤ 0.6",
         at_most(0.6)),
        ("ab/P1 gate overhead", lambda m, t: m[f"ab/P1/g1_elementwise_vs_plain/t:{t}"]["overhead_pct"] / 100, "≤ 0.01",
         at_most(0.01)),
        ("ab/D1 gate overhead", lambda m, t: m[f"ab/D1/g1_elementwise_vs_plain/t:{t}"]["overhead_pct"] / 100, "≤ 0.03",
         at_most(0.03)),
        ("BD32 / BD1 tokens/s (bf16)",
         lambda m, t: 32 * ms(m, f"layer/BD1/g1_elementwise_bf16/t:{t}") / ms(m, f"layer/BD32/g1_elementwise_bf16/t:{t}"),
         "≥ 3", lambda v: v >= 3),
        ("BD32 bf16 GFLOP/s / limits/fma",
         lambda m, t: m[f"layer/BD32/g1_elementwise_bf16/t:{t}"]["GFLOPS"] / m[f"limits/fma/t:{t}"]["GFLOPS"], "≥ 0.5",
         lambda v: v >= 0.5),
    ]


def targets(paths):
    runs, labels = [], []
    for p in paths:
        name = re.sub(r"^bench_results_?", "", re.sub(r"\.json$", "", p.split("/")[-1])) or "bench_results"
        for i, data in enumerate(runs_of(p)):
            runs.append(medians(p, data)[1])
            labels.append(name + (f" run {i + 1}" if i else ""))
    print("| target (t:1; t:2 in brackets) | " + " | ".join(labels) + " | goal |")
    print("|---|" + "---|" * len(labels) + "---|")
    for label, f, goal, met in target_rows():
        digits = 3 if label.startswith("ab/") else 2
        cells = []
        for m in runs:
            vals = []
            for t in (1, 2):
                try:
                    v = f(m, t)
                    vals.append(f"{v:.{digits}f}" + ("" if met(v) else "✗"))
                except (KeyError, ZeroDivisionError):
                    vals.append("")
            cells.append(vals[0] + (f" ({vals[1]})" if vals[1] else "") if vals[0] else "—")
        print(f"| {label} | " + " | ".join(cells) + f" | {goal} |")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--targets":
        targets(sys.argv[2:])
    else:
        main()
