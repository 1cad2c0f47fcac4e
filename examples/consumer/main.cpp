// A user's program: includes minitensor as an installed package and runs a few ops on the CPU.
#include <minitensor/minitensor.h>
#include <cmath>
#include <cstring>
#include <iostream>

int main() {
  using namespace mt;
  try {
    if (std::strcmp(version(), MT_VERSION_STRING) != 0) {
      std::cerr << "consumer: library " << version() << " but headers " << MT_VERSION_STRING << "\n";
      return 1;
    }
    const Device cpu = Device::cpu();
    Tensor x = randn({8, 16}, /*seed=*/1, cpu);
    Tensor w = randn({16, 4}, 2, cpu) * 0.1;
    Tensor b = zeros({4}, DType::F32, cpu);
    Tensor y = softmax(linear(x, w, b, Activation::Relu), -1);  // (8, 4), each row sums to 1
    Tensor s = sum(y, 1);
    for (float v : s.to_vector<float>()) {
      if (std::fabs(v - 1.0f) > 1e-5f) {
        std::cerr << "consumer: a softmax row sums to " << v << "\n";
        return 1;
      }
    }
    std::cout << "minitensor " << version() << ": softmax(relu(x w + b)) " << y.shape() << " on "
              << y.device() << ", row sums " << s << "\n";
  } catch (const Error& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
}
