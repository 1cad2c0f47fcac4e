// ops/: the eager API. CUDA tensors run tuned kernels; CPU tensors run the Eigen reference.
#pragma once

#include "minitensor/ops/attention.h"
#include "minitensor/ops/elementwise.h"
#include "minitensor/ops/gemm.h"
#include "minitensor/ops/norm.h"
#include "minitensor/ops/reduce.h"
#include "minitensor/ops/softmax.h"
#include "minitensor/ops/transpose.h"
