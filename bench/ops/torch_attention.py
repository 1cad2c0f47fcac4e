#!/usr/bin/env python3
"""PyTorch baseline for bench_ops' attention rows: torch.nn.functional.scaled_dot_product_attention in float32
(TF32 off), (B, 12 heads (16 in the _h16 row), T, 64), causal or not, timed with CUDA events after warm-up
two ways, as bench_ops times its rows: one call (median of 20; the host path included) and the device time
per call, 20 calls captured as one CUDA graph and replayed (median of 11 replays).

    python3 bench/ops/torch_attention.py [--mt-json bench_ops.json]

With --mt-json (bench_ops' --benchmark_out) it also prints PyTorch's time over minitensor's (> 1: minitensor
faster) for each row: the float32 kernel (BM_attention) and the TF32x3 tensor-core kernel (BM_attention_tf32x3,
float32-class accuracy), both against PyTorch's float32 (whose fused kernel runs 3xTF32 on the tensor cores
on sm_80 and later).
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_graph import capture  # noqa: E402 (bench/torch_graph.py)

ROWS = [("8x128", 8, 12, 128, False), ("8x128_causal", 8, 12, 128, True), ("4x512", 4, 12, 512, False),
        ("4x512_causal", 4, 12, 512, True), ("1x1024_causal", 1, 12, 1024, True),
        ("1x1024_causal_h16", 1, 16, 1024, True)]


def median_us(fn, iters=20, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    times.sort()
    return times[len(times) // 2]


def graph_us(fn, n=20, rounds=11):
    graph = capture(fn, calls=n)
    graph.replay()
    times = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / n)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mt-json")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    mt = {}
    if args.mt_json:
        for b in json.load(open(args.mt_json))["benchmarks"]:
            for prefix, kind in (("BM_attention/", "fp32"), ("BM_attention_tf32x3/", "x3")):
                if b["name"].startswith(prefix):
                    mt[(kind, b["name"].split("/")[1])] = (b.get("median_us"), b.get("graph_us"))

    def ratio(t, ours):
        return f"{t / ours:9.3f}" if ours else f"{'':9s}"

    print("one call (host path included), then 20 calls as one CUDA graph (device time per call); "
          "torch/mt > 1: minitensor faster")
    print(f"{'row':16s} {'timing':7s} {'torch us':>9s} {'fp32 us':>9s} {'torch/mt':>9s} {'x3 us':>9s} "
          f"{'torch/x3':>9s}")
    for name, batch, heads, t, causal in ROWS:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(batch, heads, t, 64, device="cuda", generator=g) for _ in range(3))
        fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
        for i, (timing, us) in enumerate((("call", median_us(fn)), ("graph", graph_us(fn)))):
            f32 = mt.get(("fp32", name), (None, None))[i]
            x3 = mt.get(("x3", name), (None, None))[i]
            print(f"{name:16s} {timing:7s} {us:9.1f} {f32 or float('nan'):9.1f} {ratio(us, f32)} "
                  f"{x3 or float('nan'):9.1f} {ratio(us, x3)}")


if __name__ == "__main__":
    main()
