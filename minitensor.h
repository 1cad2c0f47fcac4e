// minitensor: a CUDA tensor & BLAS runtime with a graph executor. The one header users include.
#pragma once

#include "graph/graph.h"
#include "memory/allocator.h"
#include "memory/stats.h"
#include "ops/ops.h"
#include "runtime/runtime.h"
#include "tensor/eigen.h"
#include "tensor/io.h"
#include "tensor/tensor.h"
#if defined(MT_HAS_DLPACK)
#include "tensor/dlpack.h"
#endif
