// ops/: the eager API. CUDA tensors run tuned kernels; CPU tensors run the Eigen reference.
#pragma once

#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/reduce.h"
#include "ops/softmax.h"
#include "ops/transpose.h"
