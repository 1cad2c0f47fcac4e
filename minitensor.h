// minitensor: a CUDA tensor & BLAS runtime with a graph executor. The one header users include.
#pragma once

#include "minitensor/dist/dist.h"
#include "minitensor/graph/graph.h"
#include "minitensor/graph/models.h"
#include "minitensor/graph/parallel.h"
#include "minitensor/memory/allocator.h"
#include "minitensor/memory/stats.h"
#include "minitensor/ops/ops.h"
#include "minitensor/runtime/runtime.h"
#include "minitensor/runtime/version.h"
#include "minitensor/tensor/eigen.h"
#include "minitensor/tensor/io.h"
#include "minitensor/tensor/tensor.h"
#if defined(MT_HAS_DLPACK)
#include "minitensor/tensor/dlpack.h"
#endif
