#!/usr/bin/env python3
"""PyTorch baseline for bench_dist's Megatron MLP rows: y = gelu(x W1 + b1) W2 + b2, FFN 4d, W1 split by
columns and W2 by rows over the ranks, one all-reduce of the partial sums, b2 added once after it; fp32 and
3xTF32-class (torch's "highest" matmul precision is fp32; TF32 is not 3xTF32, so the tf32x3 rows are compared
with torch fp32), one process per GPU, timed the way bench_dist times them (bench/dist/DESIGN.md).

    torchrun --nproc-per-node N bench/dist/torch_mlp_tp.py [--json torch_mlp.json] [--mt-json bench_dist.json]
    python3 bench/dist/torch_mlp_tp.py --spawn N [same options]      (its own processes, no torchrun)

Shapes: 8192 tokens x d 8192, and 1024 x 4096. Each timed batch is `reps` forwards back to back between CUDA
events; a batch's time is the slowest rank's; the median of 5 batches is reported. With --mt-json
(bench_dist's --benchmark_out) rank 0 prints torch time / mt time per row (above 1: mt is faster), and each
N-GPU row's scaling efficiency t1 / (N tN). NCCL_NVLS_ENABLE=0 is set before NCCL starts.
"""
import argparse
import datetime
import json
import os
import socket

os.environ["NCCL_NVLS_ENABLE"] = "0"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SHAPES = [(8192, 8192), (1024, 4096)]
BATCHES = 5


def weights(d, rank, n, dev):
    """Rank `rank`'s shards of W1 (d, 4d) by columns, b1 by the same, W2 (4d, d) by rows; b2 whole."""
    g = torch.Generator(device="cpu").manual_seed(1)
    ffn = 4 * d
    w1 = torch.randn(d, ffn, generator=g) / d ** 0.5
    b1 = torch.randn(ffn, generator=g)
    w2 = torch.randn(ffn, d, generator=g) / ffn ** 0.5
    b2 = torch.randn(d, generator=g)
    block = ffn // n
    cols = slice(rank * block, (rank + 1) * block)
    return (w1[:, cols].contiguous().to(dev), b1[cols].contiguous().to(dev), w2[cols, :].contiguous().to(dev),
            b2.to(dev))


def forward(x, w1, b1, w2, b2, n):
    y = F.gelu(torch.addmm(b1, x, w1)) @ w2
    if n > 1:
        dist.all_reduce(y)
    return y.add_(b2)


def measure(tokens, d, n, rank, dev):
    w1, b1, w2, b2 = weights(d, rank, n, dev)
    x = torch.randn(tokens, d, generator=torch.Generator(device="cpu").manual_seed(9)).to(dev)
    reps = 3 if tokens >= 4096 else 20
    with torch.no_grad():
        for _ in range(2):
            forward(x, w1, b1, w2, b2, n)
        times = []
        for _ in range(BATCHES):
            dist.barrier()
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                forward(x, w1, b1, w2, b2, n)
            stop.record()
            stop.synchronize()
            t = torch.tensor([start.elapsed_time(stop) / reps], device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's
            times.append(float(t))
    times.sort()
    del w1, b1, w2, b2, x
    torch.cuda.empty_cache()
    return times[len(times) // 2]


def mt_rows(path):
    """bench_dist's JSON: (math, tokens, d, gpus) -> ms of the Parallel/megatron_mlp rows."""
    rows = {}
    with open(path) as f:
        for b in json.load(f).get("benchmarks", []):
            parts = b["name"].split("/")
            if len(parts) >= 5 and parts[0] == "Parallel" and parts[1] == "megatron_mlp" and "ms" in b:
                tokens, d = map(int, parts[3].split("x"))
                rows[(parts[2], tokens, d, int(parts[4].split(":")[1]))] = b["ms"]
    return rows


def worker(local_rank, world, args):
    if "RANK" not in os.environ:  # --spawn: this process's rank
        os.environ.update(RANK=str(local_rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local_rank))
    rank = int(os.environ["RANK"])
    n = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 GEMMs, as bench_dist's fp32 rows
    dev = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl", device_id=dev)
    results = []
    for tokens, d in SHAPES:
        ms = measure(tokens, d, n, rank, dev)
        flops = 2 * 2 * tokens * d * 4 * d
        results.append({"name": f"torch/megatron_mlp/fp32/{tokens}x{d}/gpus:{n}", "tokens": tokens, "d": d,
                        "gpus": n, "ms": ms, "real_time": ms, "time_unit": "ms", "TFLOPs": flops / (ms * 1e-3) / 1e12})
    if rank == 0:
        mt = mt_rows(args.mt_json) if args.mt_json else {}
        print(f"torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, {n} GPUs: "
              f"{torch.cuda.get_device_name(dev)}")
        head = f"{'shape':<12}{'gpus':>5}{'torch ms':>11}{'TFLOP/s':>9}"
        if mt:
            head += f"{'mt fp32':>9}{'torch/mt':>9}{'mt x3':>9}{'torch/x3':>9}{'mt eff':>8}"
        print(head)
        for r in results:
            line = f"{str(r['tokens']) + 'x' + str(r['d']):<12}{n:>5}{r['ms']:>11.2f}{r['TFLOPs']:>9.1f}"
            key = (r["tokens"], r["d"], n)
            fp32, x3 = mt.get(("fp32",) + key), mt.get(("tf32x3",) + key)
            one = mt.get(("fp32", r["tokens"], r["d"], 1))
            if mt:
                line += f"{fp32 or float('nan'):>9.2f}{r['ms'] / fp32 if fp32 else float('nan'):>9.3f}"
                line += f"{x3 or float('nan'):>9.2f}{r['ms'] / x3 if x3 else float('nan'):>9.3f}"
                line += f"{one / (n * fp32) if one and fp32 else float('nan'):>8.3f}"
            print(line)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"context": {"date": datetime.datetime.now().isoformat(), "host_name": socket.gethostname(),
                                       "torch": torch.__version__, "gpus": n},
                           "benchmarks": results}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawn", type=int, default=0, help="start this many processes itself (no torchrun)")
    parser.add_argument("--json", help="write the rows as Google Benchmark JSON")
    parser.add_argument("--mt-json", help="bench_dist's JSON, for the torch / mt columns")
    args = parser.parse_args()
    if args.spawn:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        mp.spawn(worker, args=(args.spawn, args), nprocs=args.spawn, join=True)
    else:
        worker(int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), args)


if __name__ == "__main__":
    main()
