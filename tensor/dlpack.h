// DLPack: zero-copy exchange of tensors with other frameworks (PyTorch, NumPy, CuPy, JAX) through
// DLManagedTensor (dlpack/dlpack.h, version 0.6 ABI). Present when the library was built with the DLPack
// header (MT_HAS_DLPACK is defined).
//
// Ownership follows DLPack: whoever holds a DLManagedTensor* calls its deleter exactly once when done with
// it.
#pragma once

#include <dlpack/dlpack.h>

#include "minitensor/tensor/tensor.h"

namespace mt {

// Exports `t` without copying: the result views t's memory with t's shape, strides and dtype (data points at
// element 0, byte_offset is 0) and keeps the storage alive until its deleter is called. CPU tensors (pinned
// ones too) are kDLCPU, CUDA tensors kDLCUDA with their device index. For a CUDA tensor, the work queued on
// the device's current stream is finished before this returns, so a consumer may use the data on any stream.
// The consumer must have finished using the memory when it calls the deleter.
// InvalidArgument for an undefined tensor.
DLManagedTensor* to_dlpack(const Tensor& t);

// Imports `managed` without copying: the tensor (and its views) keep the producer's memory alive, and the
// producer's deleter is called once, when the last of them dies. Honours strides (NULL means row-major) and
// byte_offset. Devices: kDLCPU, kDLCUDAHost (a pinned CPU tensor), kDLCUDA (device_id must exist); dtypes:
// float32, int32, uint8 with one lane.
// On success the tensor owns `managed`. On error nothing is taken: the function throws (InvalidArgument for a
// null pointer, DTypeError for an unsupported dtype, DeviceError for an unsupported or absent device,
// ShapeError for a rank above kMaxDims, negative extents or strides) and `managed` stays the caller's to
// delete, as with a PyCapsule that a consumer refused.
Tensor from_dlpack(DLManagedTensor* managed);

}  // namespace mt
