"""DLPack between minitensor and PyTorch on a CUDA device, zero-copy both ways.

usage: test_dlpack_torch.py PATH/TO/libmt_dlpack_bridge.so
Exits 0 when every check passes, 1 on a failure, 77 (ctest's SKIP_RETURN_CODE) when torch or a CUDA device is
missing, printing the reason.
"""
import ctypes
import sys

SKIP = 77


def skip(reason):
    print(f"SKIPPED: {reason}")
    sys.exit(SKIP)


def fail(message):
    print(f"FAILED: {message}")
    sys.exit(1)


def main():
    try:
        import torch
    except ImportError as e:
        skip(f"PyTorch is not installed ({e})")
    if not torch.cuda.is_available():
        skip("PyTorch sees no CUDA device")

    lib = ctypes.CDLL(sys.argv[1])
    lib.mt_bridge_error.restype = ctypes.c_char_p
    lib.mt_bridge_make_cuda.restype = ctypes.c_void_p
    lib.mt_bridge_make_cuda.argtypes = [ctypes.c_longlong, ctypes.c_longlong, ctypes.c_int]
    lib.mt_bridge_consume.restype = ctypes.c_int
    lib.mt_bridge_consume.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_longlong), ctypes.c_int,
                                      ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_double),
                                      ctypes.POINTER(ctypes.c_int)]
    api = ctypes.pythonapi
    api.PyCapsule_New.restype = ctypes.py_object
    api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_SetName.restype = ctypes.c_int
    api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

    # minitensor -> torch: torch takes the capsule over (renames it "used_dltensor") and calls the deleter.
    rows, cols = 3, 5
    expected = torch.arange(rows * cols, dtype=torch.float32, device="cuda").reshape(rows, cols)
    for transposed in (0, 1):
        ptr = lib.mt_bridge_make_cuda(rows, cols, transposed)
        if not ptr:
            fail(f"mt_bridge_make_cuda: {lib.mt_bridge_error().decode()}")
        t = torch.from_dlpack(api.PyCapsule_New(ptr, b"dltensor", None))
        want = expected.t() if transposed else expected
        if t.device.type != "cuda" or t.dtype != torch.float32 or t.shape != want.shape:
            fail(f"imported {t.device} {t.dtype} {tuple(t.shape)}, expected cuda float32 {tuple(want.shape)}")
        if t.stride() != want.stride():
            fail(f"imported strides {t.stride()}, expected {want.stride()}")
        if not torch.equal(t, want):
            fail(f"imported values {t.cpu().tolist()}, expected {want.cpu().tolist()}")
        t.add_(1)  # writable, and released by torch when t dies
        torch.cuda.synchronize()
        del t

    # torch -> minitensor: the bridge takes the DLManagedTensor over, so the capsule must not delete it too.
    for name, source in (("contiguous", expected), ("transposed", expected.t()), ("sliced", expected[1:, ::2])):
        torch.cuda.synchronize()  # the bridge reads on its own stream
        capsule = source.__dlpack__()
        ptr = api.PyCapsule_GetPointer(capsule, b"dltensor")
        shape = (ctypes.c_longlong * 8)()
        rank, total, is_cuda = ctypes.c_int(), ctypes.c_double(), ctypes.c_int()
        if lib.mt_bridge_consume(ptr, shape, 8, ctypes.byref(rank), ctypes.byref(total), ctypes.byref(is_cuda)):
            fail(f"{name}: mt_bridge_consume: {lib.mt_bridge_error().decode()}")
        api.PyCapsule_SetName(capsule, b"used_dltensor")
        flat = source.contiguous().flatten().double().cpu()
        want_total = float((flat * torch.arange(1, flat.numel() + 1, dtype=torch.float64)).sum())
        got_shape = tuple(shape[: rank.value])
        if got_shape != tuple(source.shape) or not is_cuda.value or abs(total.value - want_total) > 1e-6:
            fail(f"{name}: minitensor saw shape {got_shape} (cuda={is_cuda.value}) sum {total.value}, "
                 f"expected {tuple(source.shape)} sum {want_total}")
    # The source tensors are still intact after minitensor released its views of them.
    if not torch.equal(expected, torch.arange(rows * cols, dtype=torch.float32, device="cuda").reshape(rows, cols)):
        fail("the torch tensor changed")
    print("OK: minitensor <-> torch DLPack round trips on", torch.cuda.get_device_name(0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
