#include "learner/gemm.hpp"

#include <cblas.h>

#include "base/check.hpp"

namespace gridtrain::learner {

namespace {
thread_local GemmRecorder* recorder = nullptr;
}  // namespace

void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc) {
  GRIDTRAIN_REQUIRE(m >= 1 && n >= 1 && k >= 1);
  if (recorder) recorder->shapes_.push_back({trans_a, trans_b, m, n, k});
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

GemmRecorder::GemmRecorder() {
  GRIDTRAIN_REQUIRE(recorder == nullptr);
  recorder = this;
}

GemmRecorder::~GemmRecorder() { recorder = nullptr; }

double GemmRecorder::flops() const {
  double total = 0;
  for (const GemmShape& s : shapes_) total += s.flops();
  return total;
}

void set_blas_threads(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
}

int blas_threads() { return openblas_get_num_threads(); }

}  // namespace gridtrain::learner
