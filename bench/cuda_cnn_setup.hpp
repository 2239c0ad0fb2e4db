#pragma once
// What the CUDA benchmarks share: the reference CNN (learner/reference_cnn.hpp), its training recipe, the data,
// and the command line. bench/pytorch_cnn.py builds the same model with the same recipe, so that the two run
// side by side.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "config/config.hpp"
#include "learner/dataset.hpp"
#include "learner/reference_cnn.hpp"

namespace gridtrain::bench {

struct CnnOptions {
  std::string data = "/usr/share/datasets/fashion-mnist";  // the four IDX files (gzip or plain)
  config::Device device = config::Device::cuda;
  config::Precision precision = config::Precision::fp32;
  config::DataOnDevice data_on_device = config::DataOnDevice::automatic;
  int epochs = 15;
  int batch = 64;
  double learning_rate = 0.01;
  double weight_decay = 5e-4;
  long steps = 0;  // > 0: time this many training steps only (no accuracy)
  int nodes = 4;   // bench_cuda_cluster
  int every = 1;   // bench_cuda_cluster: learner steps per averaging round
  double alpha = 0.3;
};

inline void usage(const char* name) {
  std::fprintf(stderr,
               "usage: %s [--data DIR] [--device cuda|cpu|auto] [--precision fp32|tf32|bf16]\n"
               "          [--data-on-device auto|true|false] [--epochs E] [--batch B] [--lr RATE]\n"
               "          [--weight-decay L2] [--steps N] [--nodes N] [--every K] [--alpha A]\n",
               name);
  std::exit(2);
}

inline CnnOptions parse(int argc, char** argv) {
  CnnOptions o;
  for (int i = 1; i < argc; ++i) {
    auto is = [&](const char* flag) { return !std::strcmp(argv[i], flag) && i + 1 < argc; };
    if (is("--data"))
      o.data = argv[++i];
    else if (is("--device")) {
      const std::string d = argv[++i];
      if (d == "cuda")
        o.device = config::Device::cuda;
      else if (d == "cpu")
        o.device = config::Device::cpu;
      else if (d == "auto")
        o.device = config::Device::automatic;
      else
        usage(argv[0]);
    } else if (is("--precision")) {
      const auto p = config::parse_enum<config::Precision>(argv[++i]);
      if (!p) usage(argv[0]);
      o.precision = *p;
    } else if (is("--data-on-device")) {
      const auto d = config::parse_enum<config::DataOnDevice>(argv[++i]);
      if (!d) usage(argv[0]);
      o.data_on_device = *d;
    } else if (is("--epochs"))
      o.epochs = std::atoi(argv[++i]);
    else if (is("--batch"))
      o.batch = std::atoi(argv[++i]);
    else if (is("--lr"))
      o.learning_rate = std::atof(argv[++i]);
    else if (is("--weight-decay"))
      o.weight_decay = std::atof(argv[++i]);
    else if (is("--steps"))
      o.steps = std::atol(argv[++i]);
    else if (is("--nodes"))
      o.nodes = std::atoi(argv[++i]);
    else if (is("--every"))
      o.every = std::atoi(argv[++i]);
    else if (is("--alpha"))
      o.alpha = std::atof(argv[++i]);
    else
      usage(argv[0]);
  }
  if (o.epochs < 1 || o.batch < 1 || o.nodes < 1 || o.every < 1) usage(argv[0]);
  return o;
}

// The CNN with momentum SGD and a cosine schedule over the run: the recipe bench/pytorch_cnn.py copies.
inline config::LearnerConfig cnn_learner(const CnnOptions& o) {
  config::LearnerConfig c = config::defaults().learner;
  c.device = o.device;
  c.precision = o.precision;
  c.data_on_device = o.data_on_device;
  c.seed = 1;
  c.batch = o.batch;
  c.epochs = o.epochs;
  c.model = learner::reference_cnn();
  c.optimizer.kind = config::OptimizerKind::momentum;
  c.optimizer.learning_rate = o.learning_rate;
  c.optimizer.momentum = 0.9;
  c.optimizer.weight_decay = o.weight_decay;
  c.optimizer.schedule = config::Schedule::cosine;
  return c;
}

// Fashion-MNIST's training and test sets from `dir`, standardised; exits 2 with an error line if missing.
inline learner::Dataset load(const std::string& dir, bool train) {
  const std::string prefix = dir + (train ? "/train" : "/t10k");
  auto d = learner::load_dataset(prefix + "-images-idx3-ubyte.gz", prefix + "-labels-idx1-ubyte.gz", true);
  if (!d.ok()) {
    std::fprintf(stderr, "error: %s\n", d.error().to_string().c_str());
    std::exit(2);
  }
  return std::move(d).value();
}

}  // namespace gridtrain::bench
