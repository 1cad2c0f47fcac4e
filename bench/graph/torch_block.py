#!/usr/bin/env python3
"""PyTorch baseline for bench_graph's Block rows: the same GPT-2 style block (pre-LayerNorm, q/k/v linears,
causal scaled_dot_product_attention, projection + residual, LayerNorm, linear + GELU (tanh), linear +
residual), float32 with TF32 off, as eager ops, as a CUDA graph and through torch.compile.

    python3 bench/graph/torch_block.py [--mt-json bench_graph.json] [--dump DIR] [--no-compile]

--dump: the folder bench_graph wrote with MT_BLOCK_DUMP (x, weights and minitensor's y, fp32 and 3xTF32, as
.npy): the block runs on those weights and the max differences to minitensor's two y are printed ("max diff"
fp32, "diff x3" 3xTF32). --mt-json: minitensor's times
(bench_graph's --benchmark_out) beside PyTorch's, as PyTorch's CUDA-graph time over minitensor's (> 1:
minitensor faster).
"""
import argparse
import json
import os
import statistics
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_graph import capture  # noqa: E402 (bench/torch_graph.py)

SHAPES = [(1, 128), (8, 128), (4, 512), (1, 1024)]
DIMS = [(768, 12), (1024, 16)]
NAMES = ["ln1_w", "ln1_b", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo", "ln2_w", "ln2_b", "w1", "b1", "w2",
         "b2"]


def block(x, w, b, t, d, h):
    def heads(n):
        return n.view(b, t, h, d // h).permute(0, 2, 1, 3)

    h1 = F.layer_norm(x, (d,), w["ln1_w"], w["ln1_b"], 1e-5)
    q, k, v = (heads(h1 @ w["w" + n] + w["b" + n]) for n in "qkv")
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True).permute(0, 2, 1, 3).reshape(b * t, d)
    x2 = x + (a @ w["wo"] + w["bo"])
    h2 = F.layer_norm(x2, (d,), w["ln2_w"], w["ln2_b"], 1e-5)
    f = F.gelu(h2 @ w["w1"] + w["b1"], approximate="tanh")
    return x2 + (f @ w["w2"] + w["b2"])


def per_run_us(fn, reps=20):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        e.record()
        e.synchronize()
        best = min(best, a.elapsed_time(e) * 1e3 / reps)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mt-json")
    ap.add_argument("--dump")
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    mt = {}
    if args.mt_json:
        # The median over repetitions (--benchmark_repetitions): the runs' own rows, not the aggregates
        # (mean, median, stddev, cv) that Google Benchmark appends under the same name.
        runs = {}
        for r in json.load(open(args.mt_json))["benchmarks"]:
            if r["name"].startswith("Block/") and r.get("run_type", "iteration") == "iteration":
                key = r["name"].split("/iterations")[0]
                runs.setdefault(key, []).append(r)
        for key, rs in runs.items():
            mt[key] = (statistics.median(r["real_time"] for r in rs), rs[-1].get("launches"),
                       rs[-1].get("kernels"))
    print(f"{'block':22s} {'eager':>8s} {'graph':>8s} {'compile':>8s} {'mt fp32':>8s} {'mt 3xtf32':>9s} "
          f"{'graph/mt':>9s} {'3x/graph':>8s} {'launches':>8s} {'kernels':>8s} {'max diff':>9s} "
          f"{'diff x3':>9s}")
    g = torch.Generator(device="cuda").manual_seed(0)
    for d, h in DIMS:
        for b, t in SHAPES:
            base = os.path.join(args.dump, f"block_{b}x{t}_{d}_") if args.dump else None
            if base and os.path.exists(base + "x.npy"):
                w = {n: torch.from_numpy(np.load(base + n + ".npy")).cuda() for n in NAMES}
                x = torch.from_numpy(np.load(base + "x.npy")).cuda()
                y_mt = torch.from_numpy(np.load(base + "y.npy")).cuda()
                y3 = base + "y_tf32x3.npy"
                y_mt3 = torch.from_numpy(np.load(y3)).cuda() if os.path.exists(y3) else None
            else:
                shapes = {"w1": (d, 4 * d), "b1": (4 * d,), "w2": (4 * d, d)}
                w = {n: torch.randn(*shapes.get(n, (d, d) if n[0] == "w" else (d,)), device="cuda",
                                    generator=g) * 0.02 for n in NAMES}
                x = torch.randn(b * t, d, device="cuda", generator=g)
                y_mt = y_mt3 = None
            with torch.no_grad():
                eager = per_run_us(lambda: block(x, w, b, t, d, h))
                static_x = x.clone()
                cg = capture(lambda: block(static_x, w, b, t, d, h))
                graph = per_run_us(cg.replay)
                comp = float("nan")
                if not args.no_compile:
                    try:
                        cb = torch.compile(lambda xx: block(xx, w, b, t, d, h))
                        comp = per_run_us(lambda: cb(x))
                    except Exception as e:  # noqa: BLE001 (a missing compiler is reported, not fatal)
                        print(f"torch.compile failed: {e}")
                ref = block(x, w, b, t, d, h)
                diff = (ref - y_mt).abs().max().item() if y_mt is not None else float("nan")
                diff3 = (ref - y_mt3).abs().max().item() if y_mt3 is not None else float("nan")
            key = f"Block/d{d}/{b}x{t}"
            ours, launches, kernels = mt.get(key + "/fp32", (float("nan"), None, None))
            ours3, _, kernels3 = mt.get(key + "/tf32x3", (float("nan"), None, None))
            # kernels: the captured graph's, fp32 / 3xTF32 (a step may launch more than one)
            kern = "/".join(str(int(k)) if k is not None else "-" for k in (kernels, kernels3))
            steps = launches if launches is not None else ""
            print(f"{key:22s} {eager:8.1f} {graph:8.1f} {comp:8.1f} {ours:8.1f} {ours3:9.1f} "
                  f"{graph / ours:9.3f} {ours3 / graph:8.3f} {steps:>8} {kern:>8s} {diff:9.2e} {diff3:9.2e}")


if __name__ == "__main__":
    main()
