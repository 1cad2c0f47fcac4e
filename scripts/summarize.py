#!/usr/bin/env python3
"""Summarises a gpu_check output folder: GPU, test counts, sanitizer errors, benchmark counters.

  summarize.py [FOLDER]            the summary of one run (default out/gpu_check)
  summarize.py --compare A B       the change from run A to run B, benchmark by benchmark: A's time over B's
                                   (> 1: B is faster) and, for GEMM rows, the change of the ratio to cuBLAS
                                   timed in the same run. A and B are folders of Google Benchmark JSON
                                   (bench_X.json, or bench_X.rN.json for repeated rounds: the median is taken)
                                   or two JSON files.
  summarize.py --compare-space A B the change from shape-space run A to run B (folders of space_SEED.json from
                                   bench_gemm --space --json): per seed, the shapes whose pick changed (their
                                   ratio to cuBLAS before and after) apart from those whose pick did not, and
                                   how far the unchanged ones drifted, split by cuBLAS's time (problems of a
                                   few microseconds move between hosts and hours; see bench/gemm/DESIGN.md).
"""
import glob
import json
import math
import os
import re
import sys
import xml.etree.ElementTree as ET


def tests(folder):
    rows, total = [], [0, 0, 0]
    for path in sorted(glob.glob(os.path.join(folder, "mt_tests_*.xml"))):
        passed = failed = skipped = 0
        failures = []
        for case in ET.parse(path).getroot().iter("testcase"):
            if case.find("failure") is not None:
                failed += 1
                failures.append(case.get("classname", "") + "." + case.get("name", ""))
            elif case.find("skipped") is not None or case.get("result") == "skipped":
                skipped += 1
            else:
                passed += 1
        name = os.path.basename(path)[:-4]
        rows.append((name, passed, failed, skipped, failures))
        for i, v in enumerate((passed, failed, skipped)):
            total[i] += v
    return rows, total


def sanitizers(folder):
    """(tool, binary, errors or None, summaries) for each compute-sanitizer log of gpu_check.sh."""
    rows = []
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        for path in sorted(glob.glob(os.path.join(folder, f"{tool}_*.log"))):
            text = open(path, errors="replace").read()
            m = re.findall(r"ERROR SUMMARY: (\d+) error", text)
            rows.append((tool, os.path.basename(path)[len(tool) + 1:-4], sum(map(int, m)) if m else None, len(m)))
    return rows


def benches(folder):
    rows = []
    skip = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "iterations",
            "real_time", "cpu_time", "time_unit", "family_index", "per_family_instance_index", "aggregate_name",
            "aggregate_unit", "error_occurred", "error_message", "label"}
    for path in sorted(glob.glob(os.path.join(folder, "bench_*.json"))):
        try:
            data = json.load(open(path))
        except (OSError, ValueError):
            rows.append((os.path.basename(path), "unreadable JSON", ""))
            continue
        items = data.get("benchmarks", [])
        has_median = any(b.get("aggregate_name") == "median" for b in items)
        for b in items:
            if has_median and b.get("run_type") == "iteration" and b.get("repetitions", 1) > 1:
                continue
            if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
                continue
            if b.get("error_occurred"):
                rows.append((b["name"], "ERROR: " + b.get("error_message", ""), ""))
                continue
            counters = {k: v for k, v in b.items() if k not in skip and isinstance(v, (int, float))}
            text = "  ".join(f"{k}={v:.4g}" for k, v in counters.items())
            rows.append((b["name"], f'{b.get("real_time", 0):.4g} {b.get("time_unit", "")}', text + ("  " + b["label"] if b.get("label") else "")))
    return rows


def bench_rows(path):
    """{benchmark name: [row, ...]} of the Google Benchmark JSON files at `path` (a folder or one file)."""
    files = [path] if os.path.isfile(path) else sorted(glob.glob(os.path.join(path, "bench_*.json")))
    rows = {}
    for f in files:
        try:
            items = json.load(open(f)).get("benchmarks", [])
        except (OSError, ValueError):
            continue
        for b in items:
            if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
                continue
            if not b.get("error_occurred"):
                rows.setdefault(b["name"], []).append(b)
    return rows


def median(values):
    v = sorted(values)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def compare(a, b, threshold=0.01):
    ra, rb = bench_rows(a), bench_rows(b)
    names = [n for n in ra if n in rb]
    if not names:
        print(f"compare: no benchmark is in both {a} and {b}")
        return 1
    print(f"{'benchmark':72s} {'A':>11s} {'B':>11s} {'A/B':>7s} {'cuBLAS ratio A -> B':>22s}")
    worse = 0
    for n in names:
        ta = median([x["real_time"] for x in ra[n]])
        tb = median([x["real_time"] for x in rb[n]])
        speed = ta / tb if tb else float("nan")
        key = "vs_cublas_fp32_interleaved" if "vs_cublas_fp32_interleaved" in ra[n][0] else "vs_cublas_fp32"
        rel = ""
        if key in ra[n][0] and key in rb[n][0] and "cublas" not in n:
            rel = f"{median([x[key] for x in ra[n]]):.3f} -> {median([x[key] for x in rb[n]]):.3f}"
        flag = "  slower" if speed < 1 - threshold else ""
        worse += bool(flag)
        unit = ra[n][0].get("time_unit", "")
        print(f"{n[:72]:72s} {ta:9.4g}{unit:>2s} {tb:9.4g}{unit:>2s} {speed:7.3f} {rel:>22s}{flag}")
    only = sorted(set(ra) ^ set(rb))
    if only:
        print(f"\n{len(only)} benchmarks in one run only, e.g. {only[:3]}")
    print(f"\n{len(names)} compared; {worse} slower by more than {threshold:.0%} in B (A/B < {1 - threshold:.2f})")
    return 0


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def compare_space(a, b, small_ms=0.012, big_ms=0.05):
    names = [os.path.basename(p) for p in glob.glob(os.path.join(a, "space_*.json"))]
    seeds = sorted(m.group(1) for m in (re.match(r"space_(\d+)\.json$", n) for n in names)
                   if m and os.path.exists(os.path.join(b, m.group(0))))
    if not seeds:
        print(f"compare-space: no space_SEED.json is in both {a} and {b}")
        return 1
    for seed in seeds:
        ra = json.load(open(os.path.join(a, f"space_{seed}.json")))["shapes"]
        rb = json.load(open(os.path.join(b, f"space_{seed}.json")))["shapes"]
        key = lambda r: (r["part"], r["batch"], r["m"], r["n"], r["k"], r["trans_a"], r["trans_b"])
        if [key(r) for r in ra] != [key(r) for r in rb]:
            print(f"seed {seed}: the two runs drew different shapes (another distribution or bench_gemm version)")
            continue
        changed = [(x, y) for x, y in zip(ra, rb) if x["config"] != y["config"]]
        same = [(x, y) for x, y in zip(ra, rb) if x["config"] == y["config"]]
        drift = lambda pairs: geomean([y["ratio"] / x["ratio"] for x, y in pairs])
        small = [(x, y) for x, y in same if x["cublas_ms"] < small_ms]
        big = [(x, y) for x, y in same if x["cublas_ms"] >= big_ms]
        print(f"seed {seed}: {len(changed)} picks changed, ratio x{drift(changed):.3f} (geomean of after / before); "
              f"{len(same)} unchanged, x{drift(same):.3f}: under {small_ms * 1e3:.0f} us x{drift(small):.3f} "
              f"(cuBLAS time x{geomean([y['cublas_ms'] / x['cublas_ms'] for x, y in small]):.3f}, ours "
              f"x{geomean([y['mt_ms'] / x['mt_ms'] for x, y in small]):.3f}), over {big_ms * 1e3:.0f} us "
              f"x{drift(big):.3f}")
        for x, y in sorted(changed, key=lambda xy: xy[1]["ratio"] / xy[0]["ratio"]):
            lay = ("T" if x["trans_a"] else "N") + ("T" if x["trans_b"] else "N")
            shape = f"{x['m']}x{x['n']}x{x['k']}" if x["batch"] == 1 else f"{x['batch']}x({x['m']}x{x['n']}x{x['k']})"
            print(f"  {x['ratio']:6.2f} -> {y['ratio']:6.2f}  {shape} {lay}  {x['config']} -> {y['config']}")
    return 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 4 and sys.argv[1] == "--compare-space":
        sys.exit(compare_space(sys.argv[2], sys.argv[3]))
    folder = sys.argv[1] if len(sys.argv) > 1 else "out/gpu_check"
    gpu = open(os.path.join(folder, "gpu.txt")).read().strip() if os.path.exists(os.path.join(folder, "gpu.txt")) else "?"
    print("\n==================== minitensor GPU check ====================")
    print(f"GPU: {gpu}")
    rows, total = tests(folder)
    if rows:
        print("\nTests                     passed  failed  skipped")
        for name, p, f, s, failures in rows:
            print(f"  {name:24s}{p:7d}{f:8d}{s:9d}")
            for fl in failures[:10]:
                print(f"      FAILED {fl}")
        print(f"  {'TOTAL':24s}{total[0]:7d}{total[1]:8d}{total[2]:9d}")
    sc = sanitizers(folder)
    if sc:
        print("\ncompute-sanitizer (errors; summaries counted)")
        for tool, name, n, k in sc:
            print(f"  {tool:10s} {name:24s}{'no summary (crashed or timed out)' if n is None else n:>6}  ({k})")
    br = benches(folder)
    if br:
        print("\nBenchmarks (median where repeated)")
        for name, t, counters in br:
            print(f"  {name:60s} {t:>12s}  {counters}")


if __name__ == "__main__":
    main()
