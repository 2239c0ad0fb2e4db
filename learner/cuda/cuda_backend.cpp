// The CUDA backend module: CudaBackend (learner/cuda/cuda_backend.hpp) on one device, and the module's entry
// point.

#include "learner/cuda/cuda_backend.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "learner/cuda/cuda_context.hpp"
#include "learner/cuda/cuda_kernels.hpp"
#include "learner/cuda/cuda_layers.hpp"
#include "learner/optimizer.hpp"
#include "learner/parameter_store.hpp"

namespace gridtrain::learner::cuda {

namespace {

// What one backend keeps for training: the optimizer's state and the mirror (see learner/cuda/cuda_backend.hpp).
class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, config::Precision precision) : ctx_(device, precision) {}
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }
  std::unique_ptr<Layer> make_layer(const LayerShape& layer, int max_batch) override {
    return cuda::make_layer(ctx_, layer, max_batch);
  }
  std::unique_ptr<Loss> make_loss(int classes, int max_batch) override {
    return cuda::make_loss(ctx_, classes, max_batch);
  }
  Buffer allocate(std::size_t floats) override {
    return Buffer(device_array<float>(floats, ctx_.compute()).release(), floats, [](float* p) { cudaFree(p); });
  }
  void upload(std::span<const float> host, float* backend) override {
    ctx_.upload(host.data(), backend, host.size_bytes());
  }
  void download(const float* backend, std::span<float> host) override {
    ctx_.download(backend, host.data(), host.size_bytes());
  }

  void attach(ParameterStore& store, const Model& model, Optimizer& optimizer, float* params,
              const float* grads) override;
  void prepare() override;
  void update(double learning_rate) override;
  void flush() override;
  void hand_to_host() override;
  StoreTransfers store_transfers() const override {
    return {passes_.load(std::memory_order_relaxed), bytes_.load(std::memory_order_relaxed)};
  }

  std::optional<std::size_t> free_bytes() override {
    std::size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free;
  }
  // The set crosses once, through the context's pinned staging; each epoch's order once; a step's gather is one
  // kernel on the compute stream, reading the order where the step starts.
  void hold_training_set(std::span<const float> images, std::span<const std::int32_t> labels,
                         std::size_t sample_floats) override {
    images_ = device_array<float>(images.size(), ctx_.compute());
    labels_ = device_array<std::int32_t>(labels.size(), ctx_.compute());
    order_ = device_array<std::uint32_t>(labels.size(), ctx_.compute());
    ctx_.upload(images.data(), images_.get(), images.size_bytes());
    ctx_.upload(labels.data(), labels_.get(), labels.size_bytes());
    sample_floats_ = sample_floats;
  }
  void hold_order(std::span<const std::uint32_t> order) override {
    ctx_.upload(order.data(), order_.get(), order.size_bytes());
  }
  void gather(std::size_t first, int batch, float* inputs, std::int32_t* labels) override {
    if (!in_step_)  // run_step() set `first` for the whole step, before a replay that runs none of this
      CUDA_CHECK(set_step_scalars(step_.get(), first, 0.0f, kSetFirst, ctx_.compute()));
    CUDA_CHECK(gather_samples(images_.get(), labels_.get(), sample_floats_, order_.get(), step_.get(), batch, inputs,
                              labels, ctx_.compute()));
  }
  void run_step(int batch, std::size_t first, double learning_rate, const std::function<void()>& work) override;
  StepGraphs step_graphs() const override { return {graphs_captured_, graphs_replayed_, graphs_off_}; }

 private:
  enum class Mirror { idle, requested, running };

  // Makes the device model equal to the store (each tensor read under its lock) and the velocity equal to
  // `optimizer_state` (empty for sgd), dropping any elastic change in flight: what the store holds is taken as
  // the whole truth (a restored checkpoint, a warm start). REQUIRES: no step in flight.
  void load(std::span<const float> optimizer_state);
  // The velocity, device to host (empty for sgd). REQUIRES: state.size() as the optimizer's.
  void download_state(std::span<float> optimizer_state);

  void publish();                                      // REQUIRES: mutex_ held, mirror_ idle
  void after_update();                                 // publishes when the mirror is idle; its error, if any
  struct StepGraph;
  void capture(StepGraph& graph, const std::function<void()>& work);
  void wait_idle(std::unique_lock<std::mutex>& lock);  // and rethrows the mirror's error
  void mirror_loop();
  void cycle();

  CudaContext ctx_;

  // Set by attach().
  ParameterStore* store_ = nullptr;
  std::vector<std::size_t> offsets_;  // tensor t is [offsets_[t], offsets_[t + 1]) of the arena
  std::size_t floats_ = 0;
  config::OptimizerConfig optimizer_;
  Optimizer* optimizer_state_ = nullptr;  // its state(): the velocity while the host holds the truth
  float* params_ = nullptr;
  const float* grads_ = nullptr;
  DeviceArray<float> velocity_;   // momentum only
  DeviceArray<float> published_;  // the model as of the last publish, then as the store was left by the cycle
  DeviceArray<float> base_;       // the store as the last cycle left it
  DeviceArray<float> delta_;      // the elastic change the last cycle found, not yet added to params_
  void* pinned_ = nullptr;        // the store's arena, while registered with CUDA
  bool host_truth_ = false;       // hand_to_host() ran: the store and the host's velocity are the model

  // The mirror's thread and stream. The learner's thread publishes only while the mirror is idle, and the
  // mirror's cycle touches published_, base_ and delta_ only between a publish and going idle again.
  std::thread thread_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t published_event_ = nullptr;  // compute stream: published_ is written
  cudaEvent_t merged_event_ = nullptr;     // mirror stream: delta_ is written
  cudaEvent_t tensor_done_ = nullptr;      // mirror stream: one tensor's round trip is over (blocking wait)
  std::mutex mutex_;
  std::condition_variable changed_;
  Mirror mirror_ = Mirror::idle;
  bool delta_ready_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::atomic<std::uint64_t> passes_{0};  // loads and mirror cycles
  std::atomic<std::uint64_t> bytes_{0};

  // A step's values that change from step to step (the first sample, the learning rate), read by the gather and
  // the optimizer from here, so that a step replayed from a CUDA graph runs with its own.
  DeviceArray<StepScalars> step_ = device_array<StepScalars>(1, ctx_.compute());
  bool in_step_ = false;  // inside run_step(): it has set step_ for the whole step

  // Steps as CUDA graphs (run_step), one per batch size: each size runs kEagerStepsBeforeCapture steps as it is
  // (cuDNN's algorithms are timed and the workspaces grown then, which a capture cannot do), then is captured
  // once and replayed.
  static constexpr int kEagerStepsBeforeCapture = 3;
  struct StepGraph {
    cudaGraphExec_t exec = nullptr;
    std::uint64_t workspace_generation = 0;
    int eager_steps = 0;
  };
  std::map<int, StepGraph> graphs_;
  std::uint64_t graphs_captured_ = 0, graphs_replayed_ = 0;
  std::string graphs_off_;  // why steps are no longer captured; "" while they are

  // The training set on the device (hold_training_set), and the epoch's order (hold_order).
  DeviceArray<float> images_;
  DeviceArray<std::int32_t> labels_;
  DeviceArray<std::uint32_t> order_;
  std::size_t sample_floats_ = 0;
};

CudaBackend::~CudaBackend() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> hold(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();  // a cycle in progress finishes first: it holds a store lock at a time
  }
  cudaStreamSynchronize(ctx_.compute());
  for (auto& [batch, graph] : graphs_)
    if (graph.exec) cudaGraphExecDestroy(graph.exec);
  if (pinned_) cudaHostUnregister(pinned_);
  if (tensor_done_) cudaEventDestroy(tensor_done_);
  if (merged_event_) cudaEventDestroy(merged_event_);
  if (published_event_) cudaEventDestroy(published_event_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaBackend::attach(ParameterStore& store, const Model& model, Optimizer& optimizer, float* params,
                         const float* grads) {
  store_ = &store;
  for (std::size_t t = 0; t <= model.tensors().size(); ++t) offsets_.push_back(model.tensor_offset(t));
  floats_ = offsets_.back();
  optimizer_ = optimizer.config();
  optimizer_state_ = &optimizer;
  params_ = params;
  grads_ = grads;
  if (optimizer_.kind == config::OptimizerKind::momentum) velocity_ = device_array<float>(floats_, ctx_.compute());
  published_ = device_array<float>(floats_, ctx_.compute());
  base_ = device_array<float>(floats_, ctx_.compute());
  delta_ = device_array<float>(floats_, ctx_.compute());
  // Pinned in place, the store's pages go to and from the device by DMA, with no staging copy on the host. If
  // the system refuses (a locked-memory limit), the copies still work, staged by the driver, only slower.
  if (floats_ > 0) {
    void* arena = store.data(0).data();  // tensor 0 starts the arena
    if (cudaHostRegister(arena, floats_ * sizeof(float), cudaHostRegisterDefault) == cudaSuccess)
      pinned_ = arena;
    else
      cudaGetLastError();  // clear it: not an error of any later call
  }
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&published_event_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&merged_event_, cudaEventDisableTiming));
  // The mirror waits for each tensor asleep, not spinning: its thread shares the host with the learner's.
  CUDA_CHECK(cudaEventCreateWithFlags(&tensor_done_, cudaEventDisableTiming | cudaEventBlockingSync));
  load(optimizer.state());
  thread_ = std::thread([this] { mirror_loop(); });
}

void CudaBackend::wait_idle(std::unique_lock<std::mutex>& lock) {
  changed_.wait(lock, [&] { return mirror_ == Mirror::idle; });
  if (error_) std::rethrow_exception(error_);
}

void CudaBackend::load(std::span<const float> optimizer_state) {
  std::unique_lock<std::mutex> lock(mutex_);
  wait_idle(lock);
  delta_ready_ = false;  // the store already holds it
  for (std::size_t t = store_->tensor_count(); t-- > 0;) {
    const std::span<float> host = store_->data(t);
    std::lock_guard<std::mutex> hold(store_->mutex(t));
    CUDA_CHECK(
        cudaMemcpyAsync(params_ + offsets_[t], host.data(), host.size_bytes(), cudaMemcpyHostToDevice, ctx_.compute()));
    ctx_.synchronize();  // the copy reads the store: done before the lock goes
    bytes_.fetch_add(host.size_bytes(), std::memory_order_relaxed);
  }
  passes_.fetch_add(1, std::memory_order_relaxed);
  const std::size_t bytes = floats_ * sizeof(float);
  CUDA_CHECK(cudaMemcpyAsync(base_.get(), params_, bytes, cudaMemcpyDeviceToDevice, ctx_.compute()));
  CUDA_CHECK(cudaMemcpyAsync(published_.get(), params_, bytes, cudaMemcpyDeviceToDevice, ctx_.compute()));
  if (velocity_ && !optimizer_state.empty())
    CUDA_CHECK(cudaMemcpyAsync(velocity_.get(), optimizer_state.data(), bytes, cudaMemcpyHostToDevice, ctx_.compute()));
  ctx_.synchronize();
}

void CudaBackend::publish() {
  if (delta_ready_) CUDA_CHECK(cudaStreamWaitEvent(ctx_.compute(), merged_event_, 0));
  CUDA_CHECK(mirror_publish(floats_, params_, delta_ready_ ? delta_.get() : nullptr, published_.get(), ctx_.compute()));
  CUDA_CHECK(cudaEventRecord(published_event_, ctx_.compute()));
  delta_ready_ = false;
  mirror_ = Mirror::requested;
  changed_.notify_all();
}

void CudaBackend::update(double learning_rate) {
  if (!in_step_)  // run_step() set the rate for the whole step, before a replay that runs none of this
    CUDA_CHECK(set_step_scalars(step_.get(), 0, static_cast<float>(learning_rate), kSetLearningRate, ctx_.compute()));
  CUDA_CHECK(optimizer_step(floats_, params_, grads_, velocity_ ? velocity_.get() : nullptr,
                            static_cast<float>(optimizer_.momentum), step_.get(),
                            static_cast<float>(optimizer_.weight_decay), ctx_.compute()));
  if (!in_step_) after_update();
}

void CudaBackend::after_update() {
  std::lock_guard<std::mutex> hold(mutex_);
  if (error_) std::rethrow_exception(error_);
  if (mirror_ == Mirror::idle) publish();
}

void CudaBackend::run_step(int batch, std::size_t first, double learning_rate, const std::function<void()>& work) {
  CUDA_CHECK(set_step_scalars(step_.get(), first, static_cast<float>(learning_rate), kSetFirst | kSetLearningRate,
                              ctx_.compute()));
  struct InStep {
    bool& flag;
    explicit InStep(bool& f) : flag(f) { flag = true; }
    ~InStep() { flag = false; }
  } in_step(in_step_);
  StepGraph& graph = graphs_[batch];
  // A record captured the cuDNN workspace's pointer: after the workspace grew (an evaluation's last, smaller
  // batch may choose an algorithm that wants more), it is dropped and made again.
  if (graph.exec && graph.workspace_generation != ctx_.workspace_generation()) {
    cudaGraphExecDestroy(graph.exec);
    graph = {};
  }
  if (graph.exec) {
    CUDA_CHECK(cudaGraphLaunch(graph.exec, ctx_.compute()));
    ++graphs_replayed_;
  } else if (graphs_off_.empty() && ++graph.eager_steps > kEagerStepsBeforeCapture) {
    capture(graph, work);
  } else {
    work();
  }
  after_update();
}

void CudaBackend::capture(StepGraph& graph, const std::function<void()>& work) {
  // Thread-local capture: the mirror's thread goes on with its own stream meanwhile, and what it calls is not
  // part of this capture.
  const cudaStream_t stream = ctx_.compute();
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  std::string failed;
  try {
    work();
  } catch (const std::exception& e) {
    failed = e.what();
  }
  cudaGraph_t captured = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &captured);
  if (failed.empty() && ended != cudaSuccess) failed = std::string("ending the capture: ") + cudaGetErrorString(ended);
  cudaGraphExec_t exec = nullptr;
  if (failed.empty()) {
    const cudaError_t made = cudaGraphInstantiate(&exec, captured, 0);
    if (made != cudaSuccess) failed = std::string("instantiating the graph: ") + cudaGetErrorString(made);
  }
  if (captured) cudaGraphDestroy(captured);
  if (!failed.empty()) {
    // Nothing ran while capturing: the step runs as it is, and so does every later one.
    cudaGetLastError();  // a capture's error is not the next call's
    graphs_off_ = "the step could not be captured as a CUDA graph (" + failed + ")";
    work();
    return;
  }
  graph.exec = exec;
  graph.workspace_generation = ctx_.workspace_generation();
  ++graphs_captured_;
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  ++graphs_replayed_;
}

void CudaBackend::prepare() {
  if (!host_truth_) return;  // the device holds the model being trained
  load(optimizer_state_->state());
  host_truth_ = false;
}

void CudaBackend::flush() {
  if (host_truth_) return;  // the store already is the model
  std::unique_lock<std::mutex> lock(mutex_);
  wait_idle(lock);
  publish();
  wait_idle(lock);
  // The store now holds the model as published, plus the elastic change the cycle found; give the device that
  // change too, so the two are equal.
  publish();
  wait_idle(lock);
  ctx_.synchronize();
}

void CudaBackend::hand_to_host() {
  if (host_truth_) return;
  flush();
  download_state(optimizer_state_->state());
  host_truth_ = true;
}

void CudaBackend::download_state(std::span<float> optimizer_state) {
  if (velocity_) ctx_.download(velocity_.get(), optimizer_state.data(), optimizer_state.size_bytes());
}

void CudaBackend::mirror_loop() {
  // The runtime's current device is per thread.
  cudaError_t status = cudaSetDevice(ctx_.device());
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || mirror_ == Mirror::requested; });
    if (stop_) return;
    mirror_ = Mirror::running;
    lock.unlock();
    std::exception_ptr error;
    try {
      CUDA_CHECK(status);
      cycle();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    delta_ready_ = !error;
    mirror_ = Mirror::idle;
    changed_.notify_all();
  }
}

void CudaBackend::cycle() {
  CUDA_CHECK(cudaStreamWaitEvent(stream_, published_event_, 0));
  for (std::size_t t = store_->tensor_count(); t-- > 0;) {
    const std::size_t offset = offsets_[t], n = offsets_[t + 1] - offsets_[t];
    float* const host = store_->data(t).data();
    std::lock_guard<std::mutex> hold(store_->mutex(t));
    CUDA_CHECK(cudaMemcpyAsync(delta_.get() + offset, host, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(mirror_merge(n, delta_.get() + offset, base_.get() + offset, published_.get() + offset, stream_));
    CUDA_CHECK(cudaMemcpyAsync(host, published_.get() + offset, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaEventRecord(tensor_done_, stream_));
    CUDA_CHECK(cudaEventSynchronize(tensor_done_));  // the copy writes the store: done before the lock goes
    bytes_.fetch_add(2 * n * sizeof(float), std::memory_order_relaxed);
  }
  CUDA_CHECK(cudaEventRecord(merged_event_, stream_));
  passes_.fetch_add(1, std::memory_order_relaxed);
}

void write(char* out, std::size_t size, const std::string& text) {
  if (size > 0) std::snprintf(out, size, "%s", text.c_str());
}

}  // namespace

}  // namespace gridtrain::learner::cuda

extern "C" __attribute__((visibility("default"))) gridtrain::learner::Backend* gridtrain_cuda_create(
    int abi, char* error, std::size_t error_size, const gridtrain::learner::CudaBackendOptions* options) {
  using gridtrain::learner::cuda::write;
  if (abi != gridtrain::learner::cuda_backend_abi) {
    write(error, error_size,
          "the CUDA backend module was built from other headers (interface " +
              std::to_string(gridtrain::learner::cuda_backend_abi) + ", asked for " + std::to_string(abi) + ")");
    return nullptr;
  }
  int count = 0;
  if (const cudaError_t status = cudaGetDeviceCount(&count); status != cudaSuccess) {
    // The runtime reports a machine with no NVIDIA driver at all as a driver too old ("CUDA driver version is
    // insufficient"): say both, with the version this build needs, so that a CPU-only machine reads as one.
    std::string why = cudaGetErrorString(status);
    if (status == cudaErrorInsufficientDriver) {
      // CUDA's version numbers are 1000 * major + 10 * minor.
      auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
      int driver = 0;
      cudaDriverGetVersion(&driver);  // 0 when no driver is loaded
      why = driver == 0 ? "no NVIDIA driver is loaded"
                        : "the NVIDIA driver supports CUDA " + version(driver) + ", older than this build's";
      why += " (this build needs one for CUDA " + version(CUDART_VERSION) + " or newer)";
    }
    write(error, error_size, "no CUDA device: " + why);
    return nullptr;
  }
  if (count == 0) {
    write(error, error_size, "no CUDA device: the driver reports none");
    return nullptr;
  }
  try {
    const auto precision = options ? options->precision : gridtrain::config::Precision::fp32;
    return new gridtrain::learner::cuda::CudaBackend(0, precision);
  } catch (const std::exception& e) {
    write(error, error_size, std::string("the CUDA backend could not start: ") + e.what());
    return nullptr;
  }
}
