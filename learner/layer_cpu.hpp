#pragma once
// The CPU backend: every layer on the host, matrix products through OpenBLAS (learner/gemm.hpp), convolution
// as im2col + GEMM, one sample at a time so the column buffer stays small (channels·k·k x output pixels).

#include "learner/layer.hpp"

namespace gridtrain::learner {

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::unique_ptr<Layer> make_layer(const LayerShape& layer, int max_batch) override;
  std::unique_ptr<Loss> make_loss(int classes, int max_batch) override;
  Buffer allocate(std::size_t floats) override;
  void upload(std::span<const float> host, float* backend) override;
  void download(const float* backend, std::span<float> host) override;
};

}  // namespace gridtrain::learner
