#!/usr/bin/env python3
"""torch.distributed (NCCL) baseline for bench_dist: all_reduce, all_gather and reduce_scatter bus bandwidth at
8 MiB - 1 GiB per rank, fp32, one process per GPU, measured the way bench_dist measures (bench/dist/DESIGN.md).

    torchrun --nproc-per-node N bench/dist/torch_collectives.py [--json torch.json] [--mt-json bench_dist.json]
    python3 bench/dist/torch_collectives.py --spawn N [same options]      (its own processes, no torchrun)

Sizes are per rank: all_reduce's tensor, all_gather's input, reduce_scatter's output. Each timed batch is
`reps` collectives back to back between CUDA events; a batch's time is the slowest rank's; the median of 10
batches is reported. Bus bandwidth: all_reduce bytes / t * 2(n-1)/n; all_gather and reduce_scatter
n * bytes / t * (n-1)/n. With --mt-json (bench_dist's --benchmark_out) rank 0 also prints mt / torch per row.
NCCL_NVLS_ENABLE=0 is set before NCCL starts (NVLink multicast stays off on the shared hosts).
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

OPS = ["all_reduce", "all_gather", "reduce_scatter"]
SIZES_MIB = [8, 16, 32, 64, 128, 256, 512, 1024]
BATCHES = 10


def bus_bytes(op, nbytes, n):
    if op == "all_reduce":
        return nbytes * 2 * (n - 1) / n
    return n * nbytes * (n - 1) / n


def alg_bytes(op, nbytes, n):
    return nbytes if op == "all_reduce" else n * nbytes


def buffers(op, elems, n, rank, dev):
    if op == "all_reduce":
        return torch.full((elems,), 1.0 + rank, device=dev), None
    if op == "all_gather":
        return torch.full((elems,), 1.0 + rank, device=dev), torch.empty(n * elems, device=dev)
    return torch.full((n * elems,), 1.0 + rank, device=dev), torch.empty(elems, device=dev)


def run_op(op, inp, out):
    if op == "all_reduce":
        dist.all_reduce(inp)
    elif op == "all_gather":
        dist.all_gather_into_tensor(out, inp)
    else:
        dist.reduce_scatter_tensor(out, inp)


def measure(op, mib, n, rank, dev):
    elems = mib * 1024 * 1024 // 4
    inp, out = buffers(op, elems, n, rank, dev)
    # Validate once (all_reduce works in place, so on a copy).
    check_in = inp.clone()
    run_op(op, check_in, out)
    torch.cuda.synchronize()
    result = check_in if op == "all_reduce" else out
    want = n * (n + 1) / 2 if op != "all_gather" else 1.0
    if float(result[0]) != want:
        raise RuntimeError(f"{op} {mib} MiB: validation failed ({float(result[0])} != {want})")
    reps = 5 if mib >= 256 else 20
    for _ in range(3):
        run_op(op, inp, out)
    times = []
    for _ in range(BATCHES):
        dist.barrier()
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            run_op(op, inp, out)
        stop.record()
        stop.synchronize()
        t = torch.tensor([start.elapsed_time(stop) / 1e3 / reps], device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's
        times.append(float(t))
    times.sort()
    del inp, out, check_in
    torch.cuda.empty_cache()
    return times[len(times) // 2]


def mt_rows(path):
    """bench_dist's Google Benchmark JSON: (op, mib) -> busbw of the mt rows."""
    rows = {}
    with open(path) as f:
        for b in json.load(f).get("benchmarks", []):
            parts = b["name"].split("/")
            if len(parts) >= 4 and parts[0] == "Collective" and parts[3] == "mt" and "busbw_GBps" in b:
                rows[(parts[1], int(parts[2].replace("MiB", "")))] = b["busbw_GBps"]
    return rows


def worker(local_rank, world, args):
    if "RANK" not in os.environ:  # --spawn: this process's rank
        os.environ.update(RANK=str(local_rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local_rank))
    rank = int(os.environ["RANK"])
    n = int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dev = torch.device("cuda", torch.cuda.current_device())
    dist.init_process_group("nccl", device_id=dev)
    results = []
    for op in OPS:
        for mib in SIZES_MIB:
            t = measure(op, mib, n, rank, dev)
            nbytes = mib * 1024 * 1024
            results.append({
                "name": f"torch/Collective/{op}/{mib}MiB", "op": op, "mib": mib, "gpus": n,
                "real_time": t * 1e6, "time_unit": "us",
                "algbw_GBps": alg_bytes(op, nbytes, n) / t / 1e9, "busbw_GBps": bus_bytes(op, nbytes, n) / t / 1e9,
            })
    if rank == 0:
        mt = mt_rows(args.mt_json) if args.mt_json else {}
        print(f"torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, {n} GPUs: "
              f"{torch.cuda.get_device_name(dev)}")
        print(f"{'op':<15}{'MiB':>6}{'us':>11}{'algbw GB/s':>12}{'busbw GB/s':>12}" + (f"{'mt/torch':>10}" if mt else ""))
        for r in results:
            line = f"{r['op']:<15}{r['mib']:>6}{r['real_time']:>11.1f}{r['algbw_GBps']:>12.1f}{r['busbw_GBps']:>12.1f}"
            if (r["op"], r["mib"]) in mt:
                line += f"{mt[(r['op'], r['mib'])] / r['busbw_GBps']:>10.3f}"
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
    parser.add_argument("--mt-json", help="bench_dist's JSON, for the mt / torch column")
    args = parser.parse_args()
    if args.spawn:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29531")
        mp.spawn(worker, args=(args.spawn, args), nprocs=args.spawn, join=True)
    else:
        worker(int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), args)


if __name__ == "__main__":
    main()
