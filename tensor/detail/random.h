// Counter-based random numbers: value i of seed s is a pure function of (s, i), computed the same way on the
// host and on the device, so rand / randn give identical tensors on CPU and CUDA for the same seed.
#pragma once

#include <cmath>
#include <cstdint>

#include "minitensor/tensor/layout.h"  // MT_HOST_DEVICE

namespace mt::detail {

// SplitMix64 finaliser over (seed, counter): full-avalanche 64-bit hash.
MT_HOST_DEVICE std::uint64_t mix64(std::uint64_t seed, std::uint64_t counter) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + counter * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 24 random bits: exact in float32, so host and device agree bit for bit.
MT_HOST_DEVICE float uniform01(std::uint64_t seed, std::uint64_t i) {
  return static_cast<float>(mix64(seed, i) >> 40) * (1.0f / 16777216.0f);
}

// Standard normal by Box-Muller in double precision (rounded once to float, so host and device agree).
MT_HOST_DEVICE float normal01(std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t h1 = mix64(seed ^ 0x5DEECE66Dull, i);
  const std::uint64_t h2 = mix64(seed ^ 0xB5297A4Dull, i);
  const double u1 = (static_cast<double>(h1 >> 11) + 1.0) * (1.0 / 9007199254740992.0);  // (0, 1]
  const double u2 = static_cast<double>(h2 >> 11) * (1.0 / 9007199254740992.0);          // [0, 1)
  const double r = sqrt(-2.0 * log(u1));
  return static_cast<float>(r * cos(6.283185307179586 * u2));
}

}  // namespace mt::detail
