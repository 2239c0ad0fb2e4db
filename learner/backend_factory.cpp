#include "learner/backend_factory.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

#include "learner/cuda/cuda_backend.hpp"
#include "learner/cpu_backend.hpp"

namespace gridtrain::learner {

namespace {

constexpr const char* module_name = "libgridtrain_cuda.so";

struct Module {
  CudaBackendCreate create = nullptr;
  std::string why;  // when create is null
};

std::vector<std::string> module_candidates() {
  std::vector<std::string> paths;
  if (const char* named = std::getenv("GRIDTRAIN_CUDA_MODULE"); named && *named) {
    paths.emplace_back(named);
    return paths;  // named explicitly: nothing else is looked at
  }
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) paths.push_back((exe.parent_path() / module_name).string());
#ifdef GRIDTRAIN_CUDA_MODULE_DIR
  paths.push_back(std::string(GRIDTRAIN_CUDA_MODULE_DIR) + "/" + module_name);
#endif
#ifdef GRIDTRAIN_CUDA_MODULE_INSTALL_DIR
  paths.push_back(std::string(GRIDTRAIN_CUDA_MODULE_INSTALL_DIR) + "/" + module_name);
#endif
  paths.emplace_back(module_name);  // the dynamic linker's search path
  return paths;
}

Module load_module() {
  Module m;
  std::string failed;  // a module that is there but does not load (a missing cuBLAS, say) is worth telling
  for (const std::string& path : module_candidates()) {
    const bool searched = path.find('/') == std::string::npos;
    if (!searched && !std::filesystem::exists(path)) continue;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* err = dlerror();
      if (!searched && failed.empty()) failed = err ? err : path;
      continue;
    }
    // The handle stays open for good: the module's buffers and threads may outlive any one backend.
    m.create = reinterpret_cast<CudaBackendCreate>(dlsym(handle, cuda_backend_entry));
    if (!m.create) m.why = path + " is not the CUDA backend (it has no " + cuda_backend_entry + ")";
    return m;
  }
  m.why = failed.empty() ? std::string("this build has no CUDA backend (no ") + module_name + " found)"
                         : "the CUDA backend did not load: " + failed;
  return m;
}

const Module& module() {
  static std::once_flag once;
  static Module m;
  std::call_once(once, [] { m = load_module(); });
  return m;
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(std::string& why, config::Precision precision) {
  const Module& m = module();
  if (!m.create) {
    why = m.why;
    return nullptr;
  }
  char error[512] = {};
  const CudaBackendOptions options{.precision = precision};
  Backend* backend = m.create(cuda_backend_abi, error, sizeof error, &options);
  if (!backend) why = error[0] ? error : "the CUDA backend could not start";
  return std::unique_ptr<Backend>(backend);
}

Result<BackendChoice> make_backend(config::Device device, config::Precision precision) {
  BackendChoice choice;
  if (device != config::Device::cpu) {
    std::string why;
    if ((choice.backend = make_cuda_backend(why, precision))) return choice;
    if (device == config::Device::cuda)
      return Error{
          .key = "learner.device",
          .message = "expected a usable GPU for cuda, found none: " + why + " (use auto to fall back to the CPU)"};
    if (precision != config::Precision::fp32)
      return Error{.key = "learner.precision",
                   .message = "expected fp32 on the CPU backend, found " + std::string(config::to_string(precision)) +
                              ": learner.device auto found no usable GPU (" + why + ") and the CPU computes in FP32 "
                              "only; set learner.precision fp32 to train on the CPU"};
    choice.note = std::move(why);
  }
  choice.backend = std::make_unique<CpuBackend>();
  return choice;
}

}  // namespace gridtrain::learner
