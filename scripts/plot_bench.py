#!/usr/bin/env python3
"""Plots of a GPU check's benchmark JSON (scripts/gpu_check.sh writes it into out/gpu_check/).

    python3 scripts/plot_bench.py OUT_DIR [--img docs/img]

Reads OUT_DIR/bench_ops.json, bench_gemm.json, bench_graph.json, bench_memory.json (Google Benchmark JSON),
torch_mlp.json (bench/graph/torch_mlp.py --json) and space_*.json (bench_gemm --space --json) where present,
and the card's name from OUT_DIR/gpu.txt (nvidia-smi), and writes one PNG per plot into --img:

    ops_bandwidth.png    memory-bound ops: achieved GB/s against the cudaMemcpy D2D copy (bench_ops)
    gemm_vs_cublas.png   the dispatched FP32 SGEMM's speed relative to cuBLAS, per shape (bench_gemm)
    mlp_latency.png      the MLP per run: eager ops and the executor's modes, beside PyTorch (bench_graph)
    allocator_pairs.png  allocate + free pairs: the caching allocator's hit path, cudaMalloc, cudaMallocAsync
                         (bench_memory)
    gemm_space.png       the shape space: each seed's 300 ratios to cuBLAS, sorted, per part (bench_gemm --space
                         --json=OUT_DIR/space_SEED.json)

A missing file skips its plot. Needs matplotlib (apt-get install python3-matplotlib, or pip install matplotlib).
"""
import argparse
import json
import os
import sys

TO_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def load(path):
    """(context, rows): the rows keyed by their name without Google Benchmark's run suffixes, errors dropped.
    With repetitions, the median aggregate stands for its runs."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as e:
        print(f"plot_bench: cannot read {path}: {e}", file=sys.stderr)
        return None, None
    rows, medians = {}, {}
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        name = "/".join(p for p in b["name"].split("/")
                        if not p.startswith(("iterations:", "manual_time", "real_time", "min_time:",
                                             "repeats:")) and p not in ("median", "mean", "stddev", "cv"))
        name = name.removesuffix("_median")
        b = dict(b, name=name, us=b.get("real_time", 0.0) * TO_US.get(b.get("time_unit", "ns"), 1e-3))
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[name] = b
        else:
            rows.setdefault(name, b)
    rows.update(medians)
    return data.get("context", {}), rows


def card_name(out_dir, contexts):
    """The GPU's name: gpu.txt (nvidia-smi --query-gpu=name,... CSV), else a JSON context that names it."""
    try:
        with open(os.path.join(out_dir, "gpu.txt")) as f:
            first = f.readline().strip()
        if first and "fail" not in first.lower() and "not found" not in first.lower():
            return first.split(",")[0].strip()
    except OSError:
        pass
    for ctx in contexts:
        for key in ("gpu", "device", "device_name", "gpu_name"):
            if ctx.get(key):
                return str(ctx[key])
    return "unknown GPU"


def title(what, card, ctx):
    date = str(ctx.get("date", ""))[:10] or "undated"
    return f"{what}\n{card}, {date}"


def save(fig, img_dir, name):
    path = os.path.join(img_dir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    print(f"wrote {path}")


def plot_ops(plt, ctx, rows, card, img_dir):
    """(a) achieved bandwidth of each memory-bound op, the D2D copy as the ceiling line."""
    copy = next((b for n, b in rows.items() if n.startswith("BM_copy_d2d")), None)
    ops = [(n.removeprefix("BM_"), b["GB/s"]) for n, b in rows.items()
           if "GB/s" in b and not n.startswith("BM_copy_d2d")]
    if not ops:
        print("plot_bench: bench_ops.json has no GB/s rows: ops plot skipped")
        return
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(ops) + 1.6))
    names = [n for n, _ in ops][::-1]
    values = [v for _, v in ops][::-1]
    ax.barh(names, values, color="tab:blue")
    if copy and copy.get("GB/s"):
        ax.axvline(copy["GB/s"], color="tab:red", linestyle="--",
                   label=f"cudaMemcpy D2D {copy['GB/s']:.0f} GB/s")
        ax.set_xlim(0, 1.4 * max(copy["GB/s"], max(values)))  # room on the right for the legend
        ax.legend(loc="upper right", fontsize=8)
    ax.set_xlabel("achieved bandwidth, GB/s (bytes read + written / median time)")
    ax.tick_params(axis="y", labelsize=8)
    ax.set_title(title("Memory-bound ops against the device copy (bench_ops)", card, ctx))
    save(fig, img_dir, "ops_bandwidth.png")
    plt.close(fig)


def plot_gemm(plt, ctx, rows, card, img_dir):
    """(b) the dispatched FP32 SGEMM (mt_fp32 rows) as a ratio to cuBLAS FP32, per shape."""
    shapes, after, inter = [], [], []
    for n, b in rows.items():
        parts = n.split("/")
        if len(parts) >= 3 and parts[0] == "gemm" and parts[2] == "mt_fp32" and "vs_cublas_fp32" in b:
            shapes.append(parts[1])
            after.append(b["vs_cublas_fp32"])
            inter.append(b.get("vs_cublas_fp32_interleaved", float("nan")))
    if not shapes:
        print("plot_bench: bench_gemm.json has no mt_fp32 rows: GEMM plot skipped")
        return
    fig, ax = plt.subplots(figsize=(max(7, 0.8 * len(shapes) + 2), 4.8))
    x = range(len(shapes))
    w = 0.38
    ax.bar([i - w / 2 for i in x], after, w, label="timed after the cuBLAS row (vs_cublas_fp32)")
    ax.bar([i + w / 2 for i in x], inter, w, label="samples interleaved with cuBLAS (vs_cublas_fp32_interleaved)")
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_xticks(list(x))
    ax.set_xticklabels(shapes, rotation=35, ha="right", fontsize=8)
    ax.set_xlabel("M x N x K (batch x (...) for batched)")
    ax.set_ylabel("cuBLAS time / minitensor time (> 1: faster)")
    ax.legend(fontsize=8, loc="best")
    ax.set_title(title("FP32 SGEMM against cuBLAS FP32 (bench_gemm, dispatched kernel)", card, ctx))
    save(fig, img_dir, "gemm_vs_cublas.png")
    plt.close(fig)


MLP_MODES = [("eager", "eager ops"), ("exec_unfused", "executor, no fusion"), ("exec_fused", "executor, fused"),
             ("exec_fused_graph", "fused + CUDA graph"), ("exec_fused_graph_tf32x3", "... TF32x3 GEMMs")]


def plot_mlp(plt, ctx, rows, torch_rows, card, img_dir):
    """(c) MLP latency per size: minitensor's modes beside PyTorch eager and CUDA graph."""
    sizes = []
    for n in rows:
        parts = n.split("/")
        if parts[0] == "MLP" and len(parts) >= 3 and parts[1] not in sizes:
            sizes.append(parts[1])
    if not sizes:
        print("plot_bench: bench_graph.json has no MLP rows: MLP plot skipped")
        return
    fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes), 4.6), squeeze=False)
    for ax, size in zip(axes[0], sizes):
        labels, values, colors = [], [], []
        for mode, label in MLP_MODES:
            b = rows.get(f"MLP/{size}/{mode}")
            if b:
                labels.append(label)
                values.append(b["us"])
                colors.append("tab:blue")
        for mode, label in (("eager", "PyTorch eager"), ("cuda_graph", "PyTorch CUDA graph")):
            b = (torch_rows or {}).get(f"torch/MLP/{size}/{mode}")
            if b:
                labels.append(label)
                values.append(b["us"])
                colors.append("tab:orange")
        ax.bar(range(len(values)), values, color=colors)
        ax.set_xticks(range(len(values)))
        ax.set_xticklabels(labels, rotation=40, ha="right", fontsize=8)
        ax.set_title(f"batch x hidden = {size}", fontsize=10)
        ax.set_ylabel("us per run (lower is better)")
    note = "" if torch_rows else " (no torch_mlp.json: minitensor only)"
    fig.suptitle(title("MLP y = softmax(relu(x W1 + b1) W2 + b2), FP32 (bench_graph)" + note, card, ctx),
                 fontsize=11)
    save(fig, img_dir, "mlp_latency.png")
    plt.close(fig)


def plot_memory(plt, ctx, rows, card, img_dir):
    """(d) per allocate + free pair, by allocator and thread count (log scale)."""
    table = {}  # variant -> {threads: us_per_pair}
    for n, b in rows.items():
        if not n.startswith("BM_Pairs_") or "us_per_pair" not in b:
            continue
        parts = n.split("/")
        threads = next((p.removeprefix("threads:") for p in parts if p.startswith("threads:")), "1")
        table.setdefault(parts[0].removeprefix("BM_Pairs_"), {})[threads] = b["us_per_pair"]
    if not table:
        print("plot_bench: bench_memory.json has no BM_Pairs_* rows: allocator plot skipped")
        return
    first = ["Caching", "cudaMallocAsync", "cudaMalloc"]
    variants = [v for v in first if v in table] + sorted(v for v in table if v not in first)
    threads = sorted({t for v in table.values() for t in v}, key=int)
    fig, ax = plt.subplots(figsize=(max(7, 1.3 * len(variants) + 2), 4.8))
    w = 0.8 / len(threads)
    for j, t in enumerate(threads):
        xs = [i + (j - (len(threads) - 1) / 2) * w for i in range(len(variants))]
        ax.bar(xs, [table[v].get(t, float("nan")) for v in variants], w, label=f"{t} thread(s)")
    ax.set_yscale("log")
    ax.set_xticks(range(len(variants)))
    ax.set_xticklabels(variants, rotation=20, ha="right", fontsize=9)
    ax.set_ylabel("us per allocate + free pair (log; lower is better)")
    ax.legend(fontsize=8)
    ax.set_title(title("Allocator hit path: caching allocator vs cudaMalloc vs cudaMallocAsync (bench_memory)",
                       card, ctx), fontsize=10)
    save(fig, img_dir, "allocator_pairs.png")
    plt.close(fig)


def plot_space(plt, runs, card, img_dir):
    """Each seed's ratios (cuBLAS time / ours), sorted: the whole sample and its transformer-layer part."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, part in zip(axes, (None, "transformer")):
        for name, run in runs:
            ratios = sorted(s["ratio"] for s in run["shapes"] if part is None or s["part"] == part)
            if not ratios:
                continue
            xs = [100.0 * (i + 0.5) / len(ratios) for i in range(len(ratios))]
            ax.plot(xs, ratios, label=f"seed {run.get('seed', name)}")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axvline(10.0, color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlabel("shapes, % (sorted by ratio)")
        ax.set_title(("all shapes" if part is None else "transformer-layer products") + f" ({len(ratios)} a seed)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("cuBLAS time / minitensor time (> 1: faster)")
    axes[0].legend()
    math = runs[0][1].get("math", "fp32")
    fig.suptitle(f"SGEMM over random user shapes ({math}, bench_gemm --space)\n{card}")
    save(fig, img_dir, "gemm_space.png")


def main():
    ap = argparse.ArgumentParser(description="Plots of scripts/gpu_check.sh's benchmark JSON.")
    ap.add_argument("out_dir", help="the GPU check's output folder (out/gpu_check)")
    ap.add_argument("--img", default="docs/img", help="where the PNGs go (default: docs/img)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_bench: matplotlib is not installed: apt-get install python3-matplotlib, or "
              "pip install matplotlib", file=sys.stderr)
        return 1
    if not os.path.isdir(args.out_dir):
        print(f"plot_bench: {args.out_dir} is not a folder (run scripts/gpu_check.sh first)", file=sys.stderr)
        return 1
    os.makedirs(args.img, exist_ok=True)
    loaded = {name: load(os.path.join(args.out_dir, f"{name}.json"))
              for name in ("bench_ops", "bench_gemm", "bench_graph", "bench_memory", "torch_mlp")}
    card = card_name(args.out_dir, [ctx for ctx, _ in loaded.values() if ctx])
    made = 0
    for name, fn in (("bench_ops", plot_ops), ("bench_gemm", plot_gemm), ("bench_memory", plot_memory)):
        ctx, rows = loaded[name]
        if rows is None:
            print(f"plot_bench: no {name}.json in {args.out_dir}: its plot skipped")
            continue
        fn(plt, ctx, rows, card, args.img)
        made += 1
    ctx, rows = loaded["bench_graph"]
    if rows is None:
        print(f"plot_bench: no bench_graph.json in {args.out_dir}: MLP plot skipped")
    else:
        plot_mlp(plt, ctx, rows, loaded["torch_mlp"][1], card, args.img)
        made += 1
    runs = []
    for f in sorted(os.listdir(args.out_dir)):
        if f.startswith("space_") and f.endswith(".json") and "tune" not in f:
            with open(os.path.join(args.out_dir, f)) as fh:
                runs.append((f[len("space_"):-len(".json")], json.load(fh)))
    if runs:
        plot_space(plt, runs, runs[0][1].get("device", card), args.img)
        made += 1
    if made == 0:
        print("plot_bench: nothing to plot", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
