#!/usr/bin/env python3
"""PyTorch baseline for bench_ops' attention rows: torch.nn.functional.scaled_dot_product_attention in float32
(TF32 off), (B, 12 heads, T, 64), causal or not, timed with CUDA events after warm-up (median of 20).

    python3 bench/ops/torch_attention.py [--mt-json bench_ops.json]

With --mt-json (bench_ops' --benchmark_out) it also prints PyTorch's time over minitensor's (> 1: minitensor
faster) for each row: the float32 kernel (BM_attention) and the TF32x3 tensor-core kernel (BM_attention_tf32x3,
float32-class accuracy), both against PyTorch's float32.
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
    mt, x3 = {}, {}
    if args.mt_json:
        for b in json.load(open(args.mt_json))["benchmarks"]:
            if b["name"].startswith("BM_attention/"):
                mt[b["name"].split("/")[1]] = b.get("median_us")
            if b["name"].startswith("BM_attention_tf32x3/"):
                x3[b["name"].split("/")[1]] = b.get("median_us")
    print(f"{'row':16s} {'torch SDPA us':>14s} {'mt fp32 us':>11s} {'torch/mt':>9s} {'mt tf32x3 us':>13s} "
          f"{'torch/x3':>9s}")
    for name, batch, t, causal in ROWS:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(batch, 12, t, 64, device="cuda", generator=g) for _ in range(3))
        us = median_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        ours, tc = mt.get(name), x3.get(name)
        ratio = f"{us / ours:9.3f}" if ours else " " * 9
        ratio3 = f"{us / tc:9.3f}" if tc else ""
        print(f"{name:16s} {us:14.1f} {ours if ours else float('nan'):11.1f} {ratio} "
              f"{tc if tc else float('nan'):13.1f} {ratio3}")


if __name__ == "__main__":
    main()
