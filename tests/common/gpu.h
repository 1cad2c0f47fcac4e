// GPU test helpers: one binary runs everywhere; GPU tests skip with a reason where there is no CUDA device.
#pragma once

#include <gtest/gtest.h>

#include "minitensor/runtime/device.h"

#define MT_REQUIRE_GPU()                                                                                \
  do {                                                                                                  \
    if (!::mt::cuda_available()) GTEST_SKIP() << "no CUDA device: " << ::mt::cuda_unavailable_reason(); \
  } while (0)

// The Hopper wgmma kernels (the TF32 modes' GEMMs, packed weights) run only on compute capability 9.0.
#define MT_REQUIRE_SM90()                                                                           \
  do {                                                                                              \
    MT_REQUIRE_GPU();                                                                               \
    const ::mt::DeviceProperties& props_ = ::mt::device_properties(0);                              \
    if (props_.cc_major != 9 || props_.cc_minor != 0)                                               \
      GTEST_SKIP() << "the wgmma kernels need compute capability 9.0, device 0 is " << props_.name; \
  } while (0)

// Skips unless at least `n` CUDA devices are present ("needs 2 CUDA devices, found 0").
#define MT_REQUIRE_GPUS(n)                                                                        \
  do {                                                                                            \
    const int mt_found_ = ::mt::cuda_device_count();                                              \
    if (mt_found_ < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA devices, found " << mt_found_; \
  } while (0)
