#pragma once
// Every matrix product of the CPU backend goes through gemm(): one place that calls OpenBLAS, and one place
// where a benchmark can see which products a training step computes (GemmRecorder), so that it can time the
// same products alone and compare.

#include <cstdint>
#include <vector>

namespace gridtrain::learner {

// The shape of one product C (m x n) = op(A) (m x k) * op(B) (k x n), all row-major.
struct GemmShape {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0;
  int n = 0;
  int k = 0;

  double flops() const { return 2.0 * m * n * k; }
  bool operator==(const GemmShape&) const = default;
};

// C = alpha * op(A) * op(B) + beta * C, row-major, through cblas_sgemm. lda/ldb/ldc are the row strides of
// A, B and C as stored (before op). beta == 0 overwrites C whatever it held.
// REQUIRES: m, n, k >= 1; the buffers hold what the shape and strides say.
void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
          int ldb, float beta, float* c, int ldc);

// While one is alive, every gemm() on the thread that made it appends its shape to it. Not nestable.
class GemmRecorder {
 public:
  GemmRecorder();
  ~GemmRecorder();
  GemmRecorder(const GemmRecorder&) = delete;
  GemmRecorder& operator=(const GemmRecorder&) = delete;

  const std::vector<GemmShape>& shapes() const { return shapes_; }
  double flops() const;

 private:
  friend void gemm(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int);
  std::vector<GemmShape> shapes_;
};

// OpenBLAS's thread count for every later gemm(), process-wide. threads <= 0 leaves the library's default.
void set_blas_threads(int threads);
int blas_threads();

}  // namespace gridtrain::learner
