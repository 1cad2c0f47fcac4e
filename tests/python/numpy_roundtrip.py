"""The NumPy side of the .npy/.npz round trip (tests/tensor/test_io.cpp, NpyNumPy.RoundTrip).

usage: numpy_roundtrip.py DIR
Reads what the C++ test saved in DIR, checks it, and writes new files for the C++ side to check:
  in:  f32.npy (3, 4) float32 = arange * 0.5, i32.npy (4, 3) int32 = arange(12).reshape(3, 4).T,
       u8.npy (5,) uint8 = 250..254, all.npz {a: f32's values, b: i32's values}
  out: out_f32.npy = f32 * 2, out_fortran.npy = asfortranarray(arange(24).reshape(2, 3, 4)) as float32,
       out_i32.npy = i32 + 1, out.npz (numpy.savez) and out_compressed.npz (numpy.savez_compressed) of
       {x: f32 * 2, y: u8}
Exits 1 with a message on any mismatch.
"""
import os
import sys

import numpy as np


def check(name, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        print(f"{name}: got {got.dtype} {got.shape} {got!r}, want {want.dtype} {want.shape} {want!r}")
        sys.exit(1)


def main():
    d = sys.argv[1]
    f32 = (np.arange(12, dtype=np.float32) * 0.5).reshape(3, 4)
    i32 = np.arange(12, dtype=np.int32).reshape(3, 4).T
    u8 = np.arange(250, 255, dtype=np.uint8)
    check("f32.npy", np.load(os.path.join(d, "f32.npy")), f32)
    check("i32.npy", np.load(os.path.join(d, "i32.npy")), i32)
    check("u8.npy", np.load(os.path.join(d, "u8.npy")), u8)
    with np.load(os.path.join(d, "all.npz")) as z:
        if sorted(z.files) != ["a", "b"]:
            print(f"all.npz: members {z.files}")
            sys.exit(1)
        check("all.npz[a]", z["a"], f32)
        check("all.npz[b]", z["b"], i32)

    np.save(os.path.join(d, "out_f32.npy"), f32 * 2)
    np.save(os.path.join(d, "out_fortran.npy"), np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4)))
    np.save(os.path.join(d, "out_i32.npy"), i32 + 1)
    np.savez(os.path.join(d, "out.npz"), x=f32 * 2, y=u8)
    np.savez_compressed(os.path.join(d, "out_compressed.npz"), x=f32 * 2, y=u8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
