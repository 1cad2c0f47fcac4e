// GPU test helpers: one binary runs everywhere; GPU tests skip with a reason where there is no CUDA device.
#pragma once

#include <gtest/gtest.h>

#include "runtime/device.h"

#define MT_REQUIRE_GPU()                                                                      \
  do {                                                                                        \
    if (!::mt::cuda_available()) GTEST_SKIP() << "no CUDA device: " << ::mt::device_report(); \
  } while (0)
