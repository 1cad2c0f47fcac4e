// The README's quickstart, built with the examples so that it keeps compiling: eager ops, then the same MLP
// as a graph, checked against the Eigen reference.
#include <iostream>

#include "minitensor/minitensor.h"

int main() {
  using namespace mt;
  try {
    const Device dev = cuda_available() ? Device::cuda(0) : Device::cpu();
    Tensor x = randn({256, 1024}, /*seed=*/1, dev);  // the same values on the CPU for the same seed
    Tensor w = randn({1024, 512}, 2, dev) * 0.03;
    Tensor b = zeros({512}, DType::F32, dev);
    Tensor y = softmax(linear(x, w, b, Activation::Relu), -1);  // bias + ReLU fused into the GEMM epilogue
    Tensor s = sum(y, 1);                                       // row sums: all 1
    std::cout << s.cpu() << "\n";
    std::cout << "x.t() is contiguous: " << x.t().is_contiguous() << "\n";  // views share storage

    Graph g;
    Node in = g.input("x", {256, 1024});
    Node w1 = g.parameter("w1", randn({1024, 1024}, 3) * 0.03), b1 = g.parameter("b1", zeros({1024}));
    Node w2 = g.parameter("w2", randn({1024, 1024}, 4) * 0.03), b2 = g.parameter("b2", zeros({1024}));
    g.output("y", g.softmax(g.matmul(g.relu(g.matmul(in, w1) + b1), w2) + b2, -1));

    ExecOptions options;
    options.device = dev;
    Executor exec(g, options);
    TensorMap out = exec.run({{"x", x}});
    std::cout << "y: " << out.at("y").shape() << " on " << out.at("y").device() << "\n";
    if (dev.is_cuda()) std::cout << check(g, {{"x", x}}).table();
    std::cout << g.to_dot().substr(0, 200) << "...\n";
  } catch (const Error& e) {
    std::cerr << "quickstart: " << e.what() << "\n";
    return 1;
  }
}
