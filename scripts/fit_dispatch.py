#!/usr/bin/env python3
"""Refit the constants of choose()'s two-tile wave model (ops/gemm/dispatch.cpp, the last rule) from
bench_gemm sweep logs.

    python3 scripts/fit_dispatch.py [--sms 132] [--verbose] LOG...

A LOG is the output of `bench_gemm --sweep=M,N,K[,BATCH[,LAYOUT]] ...` (the header line of each sweep and
its "  . config  T TFLOP/s  R x cublas" rows). The fit takes the shapes whose operands are not in whole
16-byte runs and whose K is 512 or more (the rule's domain: aligned shapes go to the rules above it) and
their rows on the two 128x128 tiles, unsplit or split with the second-kernel reduction, 256 of K a split or
more (the rule's candidates):

    rate = tile rate x busy share of the SMs x split cost
    - the two-per-SM tile (simt_128x128x8_..._2cta): rate 1; waves of two blocks an SM, and a last wave of at
      most one block per SM takes 1 / lone of a block's time (kLoneBlockRate);
    - the 16-deep tile (simt_128x128x16_...): rate deep (kDeepTileRate); waves of one block an SM;
    - split s of K: (a - b * s / K) * ks / (ks + fixed), ks = K / s (kernel_split_rate, a = kSplitRateBase,
      b = kSplitRateSlope; fixed = kBlockFixedK, not refit).

Each shape's ratios to cuBLAS are compared up to a factor of their own (cuBLAS's rate differs by shape), so
only the model's ranking within a shape counts: the fit minimises the squared log error after removing each
shape's mean. It prints the best (lone, deep, a, b) on a grid, the error of the values in the source
(read from ops/gemm/detail/dispatch.h) beside it, and with --verbose every row's measured and predicted ratio.
"""
import argparse
import math
import os
import re
import sys

HEADER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops", "gemm", "detail",
                           "dispatch.h")
NAMES = {"lone": "kLoneBlockRate", "deep": "kDeepTileRate", "a": "kSplitRateBase", "b": "kSplitRateSlope",
         "fixed": "kBlockFixedK"}
TWO = "simt_128x128x8_w64x32_t8x8_s4_2cta"
DEEP = "simt_128x128x16_w64x32_t8x8_s3"
HEADER = re.compile(r"^sweep (?:(\d+)x\()?(\d+)x(\d+)x(\d+)\)?(?: (NT|TN|TT))? (\S+): ")
ROW = re.compile(r"^  \. (\S+)\s+[\d.]+ TFLOP/s\s+([\d.]+)x cublas")
CONFIG = re.compile(r"^(%s|%s)(?:_splitk(\d+)_reducekernel)?$" % (TWO, DEEP))


def source_constants(path=HEADER_FILE):
    """The constants as the source has them (ops/gemm/detail/dispatch.h)."""
    text = open(path).read()
    values = {}
    for key, name in NAMES.items():
        m = re.search(r"constexpr double %s = ([\d.]+);" % name, text)
        if not m:
            sys.exit("fit_dispatch: %s not found in %s" % (name, path))
        values[key] = float(m.group(1))
    return values


def read(paths):
    """{(batch, m, n, k, layout): {(tile, split): ratio}} over the logs (the last row of a repeat wins)."""
    shapes, cur = {}, None
    for path in paths:
        for line in open(path):
            h = HEADER.match(line)
            if h:
                batch, m, n, k, layout, math_mode = h.groups()
                cur = None
                if math_mode == "fp32":
                    cur = (int(batch or 1), int(m), int(n), int(k), layout or "NN")
                    shapes.setdefault(cur, {})
                continue
            r = ROW.match(line)
            if r and cur:
                c = CONFIG.match(r.group(1))
                split = int(c.group(2) or 1) if c else 0
                # The rule's candidates: K of 512 or more, 256 of K a split or more.
                if c and cur[3] >= 512 and cur[3] // split >= 256:
                    shapes[cur][(c.group(1), split)] = float(r.group(2))
    return shapes


def whole_runs(shape):
    """Whether A and B run along their contiguous dim in whole 16-byte runs (4 floats)."""
    _, m, n, k, layout = shape
    a_run = m if layout[0] == "T" else k
    b_run = k if layout[1] == "T" else n
    return a_run % 4 == 0 and b_run % 4 == 0


def predict(shape, tile, split, p, sms):
    batch, m, n, k, _ = shape
    blocks = -(-m // 128) * -(-n // 128) * batch * split
    if tile == TWO:
        slots = 2 * sms
        rest = blocks % slots
        time = 2.0 * (blocks // slots) + (0.0 if rest == 0 else 1.0 / p["lone"] if rest <= sms else 2.0)
        busy, rate = blocks / (sms * time), 1.0
    else:
        busy, rate = blocks / (-(-blocks // sms) * sms), p["deep"]
    ks = k / split
    cost = (1.0 if split == 1 else p["a"] - p["b"] * split / k) * ks / (ks + p["fixed"])
    return rate * busy * cost


def error(shapes, p, sms):
    total, rows = 0.0, 0
    for shape, meas in shapes.items():
        d = [math.log(r) - math.log(max(predict(shape, t, s, p, sms), 1e-9)) for (t, s), r in meas.items()]
        mean = sum(d) / len(d)
        total += sum((x - mean) ** 2 for x in d)
        rows += len(d)
    return math.sqrt(total / max(rows, 1))


def frange(lo, hi, step):
    n = int(round((hi - lo) / step))
    return [lo + i * step for i in range(n + 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    source = source_constants()
    shapes = {s: m for s, m in read(args.logs).items() if not whole_runs(s) and len(m) >= 2}
    if not shapes:
        sys.exit("fit_dispatch: no shape without whole runs with two or more 128x128 rows in the logs")
    print("%d shapes, %d rows" % (len(shapes), sum(len(m) for m in shapes.values())))
    best = None
    for lone in frange(0.5, 1.0, 0.05):
        for deep in frange(0.85, 1.10, 0.01):
            for a in frange(0.85, 1.0, 0.015):
                for b in frange(0.0, 80.0, 8.0):
                    p = {"lone": lone, "deep": deep, "a": a, "b": b, "fixed": source["fixed"]}
                    e = error(shapes, p, args.sms)
                    if best is None or e < best[0]:
                        best = (e, p)
    e, p = best
    fmt = "lone %.2f  deep %.2f  a %.3f  b %.0f"
    print(("fit:    " + fmt + "  rms log error %.4f") % (p["lone"], p["deep"], p["a"], p["b"], e))
    print(("source: " + fmt + "  rms log error %.4f") % (source["lone"], source["deep"], source["a"],
                                                         source["b"], error(shapes, source, args.sms)))
    if args.verbose:
        for shape, meas in sorted(shapes.items()):
            batch, m, n, k, layout = shape
            print("%dx(%dx%dx%d) %s" % (batch, m, n, k, layout))
            pred = {c: predict(shape, c[0], c[1], source, args.sms) for c in meas}
            scale = math.exp(sum(math.log(meas[c] / pred[c]) for c in meas) / len(meas))
            for c in sorted(meas, key=lambda c: -meas[c]):
                name = ("2cta" if c[0] == TWO else "k16") + " s%d" % c[1]
                print("  %-9s measured %.3f  source model %.3f" % (name, meas[c], pred[c] * scale))


if __name__ == "__main__":
    main()
