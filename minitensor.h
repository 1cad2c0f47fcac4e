// minitensor: a CUDA tensor & BLAS runtime with a graph executor. The one header users include.
#pragma once

#include "runtime/runtime.h"
#include "memory/allocator.h"
#include "tensor/tensor.h"
#include "tensor/eigen.h"
#include "ops/ops.h"
#include "graph/graph.h"
