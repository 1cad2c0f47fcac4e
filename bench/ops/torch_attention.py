#!/usr/bin/env python3
"""PyTorch baseline for bench_ops' attention rows: torch.nn.functional.scaled_dot_product_attention in float32
(TF32 off), (B, 12 heads, T, 64), causal or not, timed with CUDA events after warm-up (median of 20).

    python3 bench/ops/torch_attention.py [--mt-json bench_ops.json]

With --mt-json (bench_ops' --benchmark_out) it also prints PyTorch's time over minitensor's (> 1: minitensor
faster) for each row.
"""
import argparse
import json

import torch
import torch.nn.functional as F

ROWS = [("8x128", 8, 128, False), ("8x128_causal", 8, 128, True), ("4x512", 4, 512, False),
        ("4x512_causal", 4, 512, True), ("1x1024_causal", 1, 1024, True)]


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mt-json")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    mt = {}
    if args.mt_json:
        for b in json.load(open(args.mt_json))["benchmarks"]:
            if b["name"].startswith("BM_attention/"):
                mt[b["name"].split("/")[1]] = b.get("median_us")
    print(f"{'row':16s} {'torch SDPA us':>14s} {'minitensor us':>14s} {'torch/mt':>9s}")
    for name, batch, t, causal in ROWS:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(batch, 12, t, 64, device="cuda", generator=g) for _ in range(3))
        us = median_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        ours = mt.get(name)
        ratio = f"{us / ours:9.3f}" if ours else ""
        print(f"{name:16s} {us:14.1f} {ours if ours else float('nan'):14.1f} {ratio}")


if __name__ == "__main__":
    main()
