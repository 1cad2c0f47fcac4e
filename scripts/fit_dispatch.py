#!/usr/bin/env python3
"""Refit the constants of choose()'s wave models (ops/gemm/dispatch.cpp) from bench_gemm sweep logs: the last
rule's two-tile model and the aligned wave model's two-per-SM tiles (TMA 128x64, 128x128).

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

The aligned fit takes the shapes in whole 16-byte runs, A along k and B along n (where TMA can fetch them), K
of 512 or more, under 3/4 of a wave of 256x128 tiles or in at most two waves of them that fill under 90 % (the
aligned wave model's domain), and their rows on the 256x128 tiles (either depth) and the 16-deep 128x128
tile, unsplit or split in a cluster (not the 256x128 tile's in two waves) or by the second kernel, and on the
two-per-SM tiles, unsplit or split by the second kernel, 128 of K a split or more:

    - the one-block tiles as the rule has them: rate 1 and kTile128Rate; in a cluster, waves of the
      DeviceModel's cluster slots (the H200 table in can_implement.cpp) and ks / (ks + fixed); by the second
      kernel, waves of one block an SM and kernel_split_rate x K / (K + fixed);
    - the TMA tile: rate tma (kTmaTileRate), x unsplit (kTmaUnsplitRate) unsplit; waves of two blocks an SM, a
      last wave of at most one an SM taking 1 / tma_lone (kTmaLoneBlockRate) of a block's time; ks / (ks +
      fixed);
    - the two-per-SM 128x128 tile (simt_128x128x8_..._2cta): rate two (kTile128x2Rate), its lone blocks at
      two_lone (kTile128x2LoneRate); ks / (ks + fixed) x kernel_split_rate.

These decide which tile wins, not how fast it runs, so the grid keeps the values whose picks run fastest (the
geometric mean over shapes of the pick's measured ratio over the shape's best), the rms log error breaking
ties; the same is printed for the source's values. The TMA tile's three constants are searched first, the
128x128 tile's two then.
"""
import argparse
import itertools
import math
import os
import re
import sys

HEADER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ops", "gemm", "detail",
                           "dispatch.h")
NAMES = {"lone": "kLoneBlockRate", "deep": "kDeepTileRate", "a": "kSplitRateBase", "b": "kSplitRateSlope",
         "fixed": "kBlockFixedK", "tile128": "kTile128Rate", "tma": "kTmaTileRate",
         "tma_lone": "kTmaLoneBlockRate", "unsplit": "kTmaUnsplitRate", "two": "kTile128x2Rate",
         "two_lone": "kTile128x2LoneRate"}
MODELS_FILE = os.path.join(os.path.dirname(HEADER_FILE), "..", "can_implement.cpp")
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


def sweep_rows(paths):
    """(shape, config, ratio) for each row of the logs' fp32 sweeps; shape = (batch, m, n, k, layout)."""
    for path in paths:
        cur = None
        for line in open(path):
            h = HEADER.match(line)
            if h:
                batch, m, n, k, layout, math_mode = h.groups()
                cur = None
                if math_mode == "fp32":
                    cur = (int(batch or 1), int(m), int(n), int(k), layout or "NN")
                continue
            r = ROW.match(line)
            if r and cur:
                yield cur, r.group(1), float(r.group(2))


def read(paths):
    """{(batch, m, n, k, layout): {(tile, split): ratio}} over the logs (the last row of a repeat wins)."""
    shapes = {}
    for shape, config, ratio in sweep_rows(paths):
        c = CONFIG.match(config)
        split = int(c.group(2) or 1) if c else 0
        # The rule's candidates: K of 512 or more, 256 of K a split or more.
        if c and shape[3] >= 512 and shape[3] // split >= 256:
            shapes.setdefault(shape, {})[(c.group(1), split)] = ratio
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
        busy, rate = paired(blocks, p["lone"], sms), 1.0
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


def grid_search(base, grids, score):
    """The constants (base with each grid's key set to one of its values) of the highest score."""
    keys = list(grids)
    points = (dict(base, **dict(zip(keys, values))) for values in itertools.product(*grids.values()))
    return max(points, key=score)


# ---------------------------------------------------------------- the aligned wave model's two-per-SM tiles

ALIGNED = re.compile(r"^simt_(256x128x(?:8|16)_w64x64_t16x8_s3|128x128x16_w64x32_t8x8_s3"
                     r"|128x64x32_w64x32_t8x8_s3_tma|128x128x8_w64x32_t8x8_s4_2cta)"
                     r"(?:_splitk(\d+)_(reducekernel|dsmem))?$")
TILE = {"256x128x8_w64x64_t16x8_s3": "256", "256x128x16_w64x64_t16x8_s3": "256",
        "128x128x16_w64x32_t8x8_s3": "128", "128x64x32_w64x32_t8x8_s3_tma": "tma",
        "128x128x8_w64x32_t8x8_s4_2cta": "two"}


def h200_cluster_slots(path=MODELS_FILE):
    """DeviceModel::h100()'s cluster_slots (the H200 model shares them), from can_implement.cpp."""
    m = re.search(r"cluster_slots = \{([\d, ]+)\}", open(path).read())
    if not m:
        sys.exit("fit_dispatch: cluster_slots not found in %s" % path)
    return [int(x) for x in m.group(1).split(",")]


def two_waves(m, n, sms):
    """Whether 256x128 tiles take at most two waves that fill under 90 % (the big rule's wave-model branch)."""
    tiles = -(-m // 256) * -(-n // 128)
    return 3 * sms // 4 <= tiles <= 2 * sms and tiles / (-(-tiles // sms) * sms) < 0.9 and \
        m * n / (tiles * 256 * 128) >= 0.75


def read_aligned(paths, sms):
    """{(m, n, k): {(tile, split, cluster): ratio}}: single NN products in the aligned wave model's domain."""
    shapes = {}
    for (batch, m, n, k, layout), config, ratio in sweep_rows(paths):
        c = ALIGNED.match(config)
        if not (c and batch == 1 and layout == "NN" and m % 4 == 0 and n % 4 == 0 and k % 4 == 0 and k >= 512):
            continue
        low = two_waves(m, n, sms)
        if not (low or -(-m // 256) * -(-n // 128) < 3 * sms // 4):
            continue
        tile, split, cluster = TILE[c.group(1)], int(c.group(2) or 1), c.group(3) == "dsmem"
        if tile == "256" and c.group(1).startswith("256x128x16") and split > 1:
            continue
        if k / split >= 128 and not (tile in ("tma", "two") and cluster) and \
                not (low and tile == "256" and cluster and split > 1):
            shapes.setdefault((m, n, k), {})[(tile, split, cluster)] = ratio
    return shapes


def paired(blocks, lone, sms):
    """The busy share of the SMs for a tile two of whose blocks an SM holds (dispatch.cpp, paired)."""
    rest = blocks % (2 * sms)
    last = 0.0 if rest == 0 else 1.0 / lone if rest <= sms else 2.0
    return blocks / (sms * (2.0 * (blocks // (2 * sms)) + last))


def predict_aligned(shape, config, p, sms, slots):
    m, n, k = shape
    tile, split, cluster = config
    ks = k / split
    split_rate = p["a"] - p["b"] * split / k if split > 1 else 1.0
    if tile == "tma":
        blocks = -(-m // 128) * -(-n // 64) * split
        inside = m * n / (-(-m // 128) * -(-n // 64) * 128 * 64)
        rate = p["tma"] * (p["unsplit"] if split == 1 else 1.0)
        return rate * inside * paired(blocks, p["tma_lone"], sms) * ks / (ks + p["fixed"])
    bm = 256 if tile == "256" else 128
    tiles = -(-m // bm) * -(-n // 128)
    blocks = tiles * split
    inside = m * n / (tiles * bm * 128)
    if tile == "two":
        return p["two"] * inside * paired(blocks, p["two_lone"], sms) * ks / (ks + p["fixed"]) * split_rate
    rate = (1.0 if tile == "256" else p["tile128"]) * inside
    if cluster or split == 1:
        wave = slots[split] if split < len(slots) else sms
        return rate * blocks / (-(-blocks // wave) * sms) * ks / (ks + p["fixed"])
    return rate * blocks / (-(-blocks // sms) * sms) * k / (k + p["fixed"]) * split_rate


def score_aligned(shapes, p, sms, slots):
    """(geomean of the pick's ratio over the best, rms log error) over the shapes."""
    total, rows, picks = 0.0, 0, 0.0
    for shape, meas in shapes.items():
        pred = {c: predict_aligned(shape, c, p, sms, slots) for c in meas}
        d = [math.log(meas[c]) - math.log(pred[c]) for c in meas]
        mean = sum(d) / len(d)
        total += sum((x - mean) ** 2 for x in d)
        rows += len(d)
        picks += math.log(meas[max(meas, key=lambda c: pred[c])] / max(meas.values()))
    return math.exp(picks / max(len(shapes), 1)), math.sqrt(total / max(rows, 1))


def fit_aligned(logs, source, sms, verbose):
    slots = h200_cluster_slots()
    shapes = {s: m for s, m in read_aligned(logs, sms).items()
              if any(c[0] in ("tma", "two") for c in m) and any(c[0] in ("256", "128") for c in m)}
    if not shapes:
        print("aligned wave model: no aligned NN shape with two-per-SM and one-block rows in the logs")
        return
    print("aligned wave model: %d shapes, %d rows" % (len(shapes), sum(len(m) for m in shapes.values())))

    def speed_then_error(p):
        picks, e = score_aligned(shapes, p, sms, slots)
        return picks, -e

    p = grid_search(source, {"tma": frange(0.85, 1.05, 0.01), "tma_lone": frange(0.4, 0.8, 0.025),
                             "unsplit": frange(0.85, 1.0, 0.025)}, speed_then_error)
    p = grid_search(p, {"two": frange(0.85, 1.10, 0.01), "two_lone": frange(0.5, 1.0, 0.05)}, speed_then_error)
    fmt = "tma %.2f  tma_lone %.3f  unsplit %.3f  two %.2f  two_lone %.2f"
    for name, q in (("fit:   ", p), ("source:", source)):
        picks, e = score_aligned(shapes, q, sms, slots)
        print((name + " " + fmt + "  picks at %.4f of the best, rms log error %.4f") %
              (q["tma"], q["tma_lone"], q["unsplit"], q["two"], q["two_lone"], picks, e))
    if verbose:
        for shape, meas in sorted(shapes.items()):
            pred = {c: predict_aligned(shape, c, source, sms, slots) for c in meas}
            pick = max(meas, key=lambda c: pred[c])
            name = lambda c: "%s s%d%s" % (c[0], c[1], " cluster" if c[2] else "")
            print("%dx%dx%d: source picks %s at %.3f, best %s at %.3f" %
                  (shape + (name(pick), meas[pick], name(max(meas, key=meas.get)), max(meas.values()))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    source = source_constants()
    fit_last_rule(args.logs, source, args.sms, args.verbose)
    fit_aligned(args.logs, source, args.sms, args.verbose)


def fit_last_rule(logs, source, sms, verbose):
    shapes = {s: m for s, m in read(logs).items() if not whole_runs(s) and len(m) >= 2}
    if not shapes:
        print("last rule: no shape without whole runs with two or more 128x128 rows in the logs")
        return
    print("last rule: %d shapes, %d rows" % (len(shapes), sum(len(m) for m in shapes.values())))
    grids = {"lone": frange(0.5, 1.0, 0.05), "deep": frange(0.85, 1.10, 0.01), "a": frange(0.85, 1.0, 0.015),
             "b": frange(0.0, 80.0, 8.0)}
    p = grid_search(source, grids, lambda p: -error(shapes, p, sms))
    e = error(shapes, p, sms)
    fmt = "lone %.2f  deep %.2f  a %.3f  b %.0f"
    print(("fit:    " + fmt + "  rms log error %.4f") % (p["lone"], p["deep"], p["a"], p["b"], e))
    print(("source: " + fmt + "  rms log error %.4f") % (source["lone"], source["deep"], source["a"],
                                                         source["b"], error(shapes, source, sms)))
    if verbose:
        for shape, meas in sorted(shapes.items()):
            batch, m, n, k, layout = shape
            print("%dx(%dx%dx%d) %s" % (batch, m, n, k, layout))
            pred = {c: predict(shape, c[0], c[1], source, sms) for c in meas}
            scale = math.exp(sum(math.log(meas[c] / pred[c]) for c in meas) / len(meas))
            for c in sorted(meas, key=lambda c: -meas[c]):
                name = ("2cta" if c[0] == TWO else "k16") + " s%d" % c[1]
                print("  %-9s measured %.3f  source model %.3f" % (name, meas[c], pred[c] * scale))


if __name__ == "__main__":
    main()
