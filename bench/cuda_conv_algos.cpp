// Every cuDNN convolution algorithm on the Fashion-MNIST CNN's two convolutions, in FP32 without tensor cores
// (the CUDA backend's math mode): time per call and error against a direct sum, for the forward pass, the filter
// gradient and the data gradient. The CUDA backend times its candidates itself and never uses Winograd
// (learner/cuda/cuda_layers.cpp); this shows why.
//
// Usage: bench_cuda_conv_algos [--batch N]... (default: 64 and 256) [--repeats R] (default 20)
// Prints one row per layer, batch, pass and algorithm: milliseconds (median of R), workspace in MB, determinism,
// whether the backend may choose it ("used"), and max |result - reference| / max |reference|, where the
// reference is IMPLICIT_GEMM, ALGO_1 and ALGO_1 (direct sums).

#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "error: %s: %s\n", what, cudaGetErrorString(status));
  std::exit(1);
}

void check(cudnnStatus_t status, const char* what) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  std::fprintf(stderr, "error: %s: %s\n", what, cudnnGetErrorString(status));
  std::exit(1);
}

struct Device {
  float* p = nullptr;
  std::size_t n = 0;
  explicit Device(std::size_t count) : n(count) {
    check(cudaMalloc(&p, std::max<std::size_t>(n, 1) * 4), "cudaMalloc");
  }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  void put(const std::vector<float>& h) { check(cudaMemcpy(p, h.data(), n * 4, cudaMemcpyHostToDevice), "upload"); }
  std::vector<float> get() const {
    std::vector<float> h(n);
    check(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost), "download");
    return h;
  }
};

std::vector<float> normal(std::mt19937_64& rng, std::size_t n, double std) {
  std::normal_distribution<double> d(0.0, std);
  std::vector<float> out(n);
  for (float& v : out) v = static_cast<float>(d(rng));
  return out;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    scale = std::max(scale, std::abs(double(want[i])));
  }
  return scale > 0 ? worst / scale : worst;
}

const char* forward_name(int a) {
  static const char* names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
                                "WINOGRAD",      "WINOGRAD_NONFUSED"};
  return names[a];
}
const char* filter_name(int a) {
  static const char* names[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  return names[a];
}
const char* data_name(int a) {
  static const char* names[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  return names[a];
}
// What the backend may choose (learner/cuda/cuda_layers.cpp's candidates): all but Winograd.
bool used_forward(int a) { return a < 6; }
bool used_filter(int a) { return a != 4 && a != 5; }
bool used_data(int a) { return a < 4; }
// cuDNN's documentation: these use atomics, so two runs may differ in the last
// bits.
bool deterministic_filter(int a) { return a != 0 && a != 3; }
bool deterministic_data(int a) { return a != 0; }

struct Conv {
  const char* name;
  int channels, side, filters, kernel, padding;
};

class Bench {
 public:
  Bench(cudnnHandle_t h, const Conv& c, int batch, int repeats, std::mt19937_64& rng)
      : h_(h),
        c_(c),
        batch_(batch),
        repeats_(repeats),
        x_(std::size_t(batch) * c.channels * c.side * c.side),
        w_(std::size_t(c.filters) * c.channels * c.kernel * c.kernel),
        y_(std::size_t(batch) * c.filters * c.side * c.side),
        dy_(y_.n),
        dx_(x_.n),
        dw_(w_.n) {
    check(cudnnCreateTensorDescriptor(&xd_), "x descriptor");
    check(cudnnCreateTensorDescriptor(&yd_), "y descriptor");
    check(cudnnCreateFilterDescriptor(&wd_), "w descriptor");
    check(cudnnCreateConvolutionDescriptor(&cd_), "conv descriptor");
    check(cudnnSetTensor4dDescriptor(xd_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch, c.channels, c.side, c.side), "x");
    check(cudnnSetTensor4dDescriptor(yd_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch, c.filters, c.side, c.side), "y");
    check(
        cudnnSetFilter4dDescriptor(wd_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, c.filters, c.channels, c.kernel, c.kernel),
        "w");
    check(cudnnSetConvolution2dDescriptor(cd_, c.padding, c.padding, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                          CUDNN_DATA_FLOAT),
          "conv");
    check(cudnnSetConvolutionMathType(cd_, CUDNN_FMA_MATH), "math type");
    x_.put(normal(rng, x_.n, 1.0));
    w_.put(normal(rng, w_.n, 0.1));
    dy_.put(normal(rng, dy_.n, 1.0));
    check(cudaEventCreate(&start_), "event");
    check(cudaEventCreate(&stop_), "event");
  }
  ~Bench() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudnnDestroyConvolutionDescriptor(cd_);
    cudnnDestroyFilterDescriptor(wd_);
    cudnnDestroyTensorDescriptor(yd_);
    cudnnDestroyTensorDescriptor(xd_);
  }

  void run() {
    const float one = 1, zero = 0;
    std::vector<float> reference;
    for (int a : {0, 1, 2, 3, 4, 5, 6, 7}) {  // the reference (IMPLICIT_GEMM) first
      const auto algo = static_cast<cudnnConvolutionFwdAlgo_t>(a);
      std::size_t bytes = 0;
      if (cudnnGetConvolutionForwardWorkspaceSize(h_, xd_, wd_, cd_, yd_, algo, &bytes) != CUDNN_STATUS_SUCCESS)
        continue;
      Device ws(bytes / 4 + 1);
      auto call = [&] {
        return cudnnConvolutionForward(h_, &one, xd_, x_.p, wd_, w_.p, cd_, algo, ws.p, bytes, &zero, yd_, y_.p);
      };
      report("forward", forward_name(a), used_forward(a), true, bytes, call, y_, reference);
    }
    reference.clear();
    for (int a : {1, 0, 2, 3, 4, 5, 6}) {  // the reference (ALGO_1) first
      const auto algo = static_cast<cudnnConvolutionBwdFilterAlgo_t>(a);
      std::size_t bytes = 0;
      if (cudnnGetConvolutionBackwardFilterWorkspaceSize(h_, xd_, yd_, cd_, wd_, algo, &bytes) != CUDNN_STATUS_SUCCESS)
        continue;
      Device ws(bytes / 4 + 1);
      auto call = [&] {
        return cudnnConvolutionBackwardFilter(h_, &one, xd_, x_.p, yd_, dy_.p, cd_, algo, ws.p, bytes, &zero, wd_,
                                              dw_.p);
      };
      report("filter", filter_name(a), used_filter(a), deterministic_filter(a), bytes, call, dw_, reference);
    }
    reference.clear();
    for (int a : {1, 0, 2, 3, 4, 5}) {  // the reference (ALGO_1) first
      const auto algo = static_cast<cudnnConvolutionBwdDataAlgo_t>(a);
      std::size_t bytes = 0;
      if (cudnnGetConvolutionBackwardDataWorkspaceSize(h_, wd_, yd_, cd_, xd_, algo, &bytes) != CUDNN_STATUS_SUCCESS)
        continue;
      Device ws(bytes / 4 + 1);
      auto call = [&] {
        return cudnnConvolutionBackwardData(h_, &one, wd_, w_.p, yd_, dy_.p, cd_, algo, ws.p, bytes, &zero, xd_, dx_.p);
      };
      report("data", data_name(a), used_data(a), deterministic_data(a), bytes, call, dx_, reference);
    }
  }

 private:
  template <class Call>
  void report(const char* pass, const char* algo, bool used, bool deterministic, std::size_t bytes, Call call,
              const Device& out, std::vector<float>& reference) {
    if (call() != CUDNN_STATUS_SUCCESS) return;  // offered a workspace size, yet not supported here
    check(cudaDeviceSynchronize(), pass);
    const std::vector<float> result = out.get();
    if (reference.empty()) reference = result;
    for (int i = 0; i < 3; ++i) check(call(), pass);
    std::vector<float> ms;
    for (int i = 0; i < repeats_; ++i) {
      check(cudaEventRecord(start_), "record");
      check(call(), pass);
      check(cudaEventRecord(stop_), "record");
      check(cudaEventSynchronize(stop_), "synchronize");
      float t = 0;
      check(cudaEventElapsedTime(&t, start_, stop_), "elapsed");
      ms.push_back(t);
    }
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    std::printf("%-6s %5d  %-7s %-22s %9.4f %10.1f  %-13s %-6s %10.2e\n", c_.name, batch_, pass, algo,
                ms[ms.size() / 2], bytes / 1e6, deterministic ? "deterministic" : "atomics", used ? "yes" : "no",
                relative_error(result, reference));
  }

  cudnnHandle_t h_;
  Conv c_;
  int batch_, repeats_;
  Device x_, w_, y_, dy_, dx_, dw_;
  cudnnTensorDescriptor_t xd_ = nullptr, yd_ = nullptr;
  cudnnFilterDescriptor_t wd_ = nullptr;
  cudnnConvolutionDescriptor_t cd_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches;
  int repeats = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--batch" || arg == "--repeats") && i + 1 < argc) {
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 1 || v > 65536) {
        std::fprintf(stderr, "error: %s takes a whole number from 1 to 65536, not '%s'\n", arg.c_str(), argv[i]);
        return 2;
      }
      if (arg == "--batch")
        batches.push_back(static_cast<int>(v));
      else
        repeats = static_cast<int>(v);
    } else {
      std::fprintf(stderr, "usage: %s [--batch N]... [--repeats R]\n", argv[0]);
      return 2;
    }
  }
  if (batches.empty()) batches = {64, 256};
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "device properties");
  std::printf("%s, cuDNN %zu, FP32 (CUDNN_FMA_MATH), median of %d calls\n", prop.name, cudnnGetVersion(), repeats);
  std::printf("%-6s %5s  %-7s %-22s %9s %10s  %-13s %-6s %10s\n", "layer", "batch", "pass", "algorithm", "ms", "MB", "",
              "used", "rel.error");
  cudnnHandle_t handle = nullptr;
  check(cudnnCreate(&handle), "cudnnCreate");
  std::mt19937_64 rng(1);
  const Conv convs[] = {{"conv1", 1, 28, 32, 5, 2}, {"conv2", 32, 14, 64, 5, 2}};
  for (int batch : batches)
    for (const Conv& c : convs) Bench(handle, c, batch, repeats, rng).run();
  cudnnDestroy(handle);
  return 0;
}
