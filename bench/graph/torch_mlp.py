#!/usr/bin/env python3
"""PyTorch baseline for bench_graph: the MLP y = softmax(relu(x W1 + b1) W2 + b2), eager and as a CUDA graph,
and the pinned host add c = a + b (2 x 100 M floats, back to the host).

    python3 bench/graph/torch_mlp.py [--mt-json bench_graph.json] [--no-host] [--json torch_mlp.json]

Prints per-run microseconds; with --mt-json (bench_graph's --benchmark_out) it also prints minitensor / PyTorch
ratios; with --json it writes its own numbers in Google Benchmark's JSON layout (rows torch/MLP/<batch>x<hidden>/
eager and .../cuda_graph, torch/HostAdd/100M; real_time in microseconds), which scripts/plot_bench.py reads.
float32 throughout, TF32 off (PyTorch's default for matmul), same shapes and init ranges as bench_graph.
"""
import argparse
import datetime
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_graph import capture  # noqa: E402 (bench/torch_graph.py)

SIZES = [(64, 512), (256, 1024), (4096, 4096)]


def per_run_us(fn, reps, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):  # median-ish: best of 5 batches, each reps back-to-back runs then one sync
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best * 1e6


def mlp(batch, hidden):
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = "cuda"
    s = hidden ** -0.5
    g = torch.Generator(device="cpu").manual_seed(0)
    x = (torch.rand(batch, hidden, generator=g) * 2 - 1).to(dev)
    w1 = ((torch.rand(hidden, hidden, generator=g) * 2 - 1) * s).to(dev)
    b1 = ((torch.rand(hidden, generator=g) * 2 - 1) * 0.1).to(dev)
    w2 = ((torch.rand(hidden, hidden, generator=g) * 2 - 1) * s).to(dev)
    b2 = ((torch.rand(hidden, generator=g) * 2 - 1) * 0.1).to(dev)

    def f():
        return torch.softmax(torch.relu(x @ w1 + b1) @ w2 + b2, dim=-1)

    reps = 5 if hidden >= 4096 else 200
    eager = per_run_us(f, reps)
    graph = capture(f)
    graphed = per_run_us(graph.replay, reps)
    return eager, graphed


def host_add():
    n = 100_000_000
    a = torch.rand(n).pin_memory()
    b = torch.rand(n).pin_memory()
    c = torch.empty(n).pin_memory()

    def f():
        c.copy_((a.to("cuda", non_blocking=True) + b.to("cuda", non_blocking=True)), non_blocking=True)

    return per_run_us(f, 3, warmup=2) / 1000.0


def mt_times(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print(f"cannot read {path}: {e}")
        return {}
    out = {}
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        t = b["real_time"]
        unit = b.get("time_unit", "us")
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[unit]
        # "MLP/64x512/eager/iterations:20/manual_time" -> "MLP/64x512/eager"
        name = "/".join(p for p in b["name"].split("/") if not p.startswith(("iterations:", "manual_time")))
        out[name] = t * scale
    return out


def write_json(path, rows, host_ms):
    """Our numbers in Google Benchmark's JSON layout, so that the same readers take both."""
    bench = []
    for batch, hidden, eager, graphed in rows:
        for mode, us in (("eager", eager), ("cuda_graph", graphed)):
            bench.append({"name": f"torch/MLP/{batch}x{hidden}/{mode}", "run_type": "iteration",
                          "real_time": us, "time_unit": "us"})
    if host_ms is not None:
        bench.append({"name": "torch/HostAdd/100M", "run_type": "iteration", "real_time": host_ms * 1000.0,
                      "time_unit": "us"})
    context = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "executable": "bench/graph/torch_mlp.py", "torch": torch.__version__,
               "gpu": torch.cuda.get_device_name(), "tf32": False}
    with open(path, "w") as f:
        json.dump({"context": context, "benchmarks": bench}, f, indent=2)
    print(f"wrote {path}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mt-json")
    ap.add_argument("--no-host", action="store_true")
    ap.add_argument("--json", metavar="PATH", help="write the numbers as Google Benchmark-style JSON")
    args = ap.parse_args()
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    rows = []
    for batch, hidden in SIZES:
        eager, graphed = mlp(batch, hidden)
        rows.append((batch, hidden, eager, graphed))
        print(f"torch MLP {batch}x{hidden}: eager {eager:9.1f} us/run   cuda graph {graphed:9.1f} us/run")
    host_ms = None
    if not args.no_host:
        host_ms = host_add()
        print(f"torch pinned host add 2 x 100M floats -> host: {host_ms:.2f} ms")
    if args.json:
        write_json(args.json, rows, host_ms)
    if args.mt_json:
        mt = mt_times(args.mt_json)
        print("\nminitensor vs PyTorch (per run, us; ratio = minitensor / best PyTorch; < 1 is faster)")
        print(f"{'size':>11} {'mode':>24} {'mt us':>10} {'torch eager':>12} {'torch graph':>12} {'ratio':>7}")
        for batch, hidden, eager, graphed in rows:
            for mode in ["eager", "exec_unfused", "exec_fused", "exec_fused_graph", "exec_fused_graph_tf32x3"]:
                key = f"MLP/{batch}x{hidden}/{mode}"
                if key in mt:
                    best = min(eager, graphed)
                    print(f"{batch:>5}x{hidden:<5} {mode:>24} {mt[key]:10.1f} {eager:12.1f} {graphed:12.1f} "
                          f"{mt[key] / best:7.2f}")
        h2d, d2h = mt.get("HostAdd/100M/ideal_h2d"), mt.get("HostAdd/100M/ideal_d2h")
        ser, pipe = mt.get("HostAdd/100M/serial"), mt.get("HostAdd/100M/pipelined")
        both = mt.get("HostAdd/100M/ideal_both")
        if h2d and d2h and pipe:
            ideal = max(h2d, d2h) / 1000.0
            print(f"\nhost add: ideal max(H2D {h2d / 1000:.2f}, D2H {d2h / 1000:.2f}) = {ideal:.2f} ms; "
                  f"pipelined {pipe / 1000:.2f} ms ({pipe / 1000 / ideal:.3f}x ideal, target <= 1.15x); "
                  f"serial {ser / 1000 if ser else float('nan'):.2f} ms"
                  + (f"; torch {host_ms:.2f} ms" if host_ms else ""))
            if both:
                print(f"both copies at once on two streams (the link's duplex rate): {both / 1000:.2f} ms "
                      f"= {both / 1000 / ideal:.3f}x ideal")
            sweep = sorted((v, k.split("/")[-1]) for k, v in mt.items() if "/pipelined_chunk" in k)
            if sweep:
                print("pipeline chunk x streams, fastest first: "
                      + ", ".join(f"{name} {v / 1000:.2f} ms" for v, name in sweep[:5]))


if __name__ == "__main__":
    main()
