#pragma once
// The enum-valued settings, and the YAML spelling of each value.

#include <cstddef>
#include <iterator>
#include <optional>
#include <string_view>

#include "allreduce/quorum.hpp"
#include "allreduce/round_config.hpp"

namespace gridtrain::config {

// The quorum and outer modes and the wire format live with the allreduce (allreduce/quorum.hpp, round_config.hpp); the config only spells
// them.
using allreduce::OuterMode;
using allreduce::QuorumMode;
using allreduce::WireFormat;
// model: gridnode trains learner.model; probe: a vector to average (learner/probe.hpp); external: the model belongs to
// the process that hosts the node (the PyTorch front end), and the learner and data sections are not used.
enum class LearnerKind { model, probe, external };
enum class Device { automatic, cpu, cuda };
// The arithmetic of the learner's products (learner.precision): fp32 throughout; tf32, FP32 data multiplied on
// tensor cores with a 10-bit mantissa; bf16, the products' inputs rounded to BF16, FP32 accumulation and FP32
// master weights. The CPU backend computes fp32 only.
enum class Precision { fp32, tf32, bf16 };
// Where the training set lives while training (learner.data_on_device): automatic = on the GPU when it fits there.
enum class DataOnDevice { automatic, yes, no };
enum class OptimizerKind { sgd, momentum };
enum class Schedule { constant, step, cosine };
// How the learning rate grows with the cluster's size N (learner.optimizer.scale_with_nodes): N nodes that average
// closely train like one learner with an N times larger batch, which wants a larger rate (Goyal et al. 2017: linear,
// with a warm-up).
enum class NodeScaling { none, linear, sqrt };
enum class ShardMode { node, none };
enum class ShardMethod { contiguous, permutation };
enum class LogFormat { text, json };
enum class LogLevel { trace, debug, info, warn, error };
enum class LayerType { dense, relu, conv2d, maxpool, flatten, softmax_cross_entropy };

// EnumNames<E>::names[i] is how value i of E is written in YAML. Declaration order, no gaps.
template <class E>
struct EnumNames;

template <class E>
concept NamedEnum = requires { EnumNames<E>::names; };

template <>
struct EnumNames<QuorumMode> {
  static constexpr std::string_view names[] = {"fraction", "timeout"};
};
template <>
struct EnumNames<OuterMode> {
  static constexpr std::string_view names[] = {"elastic", "nesterov"};
};
template <>
struct EnumNames<WireFormat> {
  static constexpr std::string_view names[] = {"fp32", "bf16", "int8"};
};
template <>
struct EnumNames<LearnerKind> {
  static constexpr std::string_view names[] = {"model", "probe", "external"};
};
template <>
struct EnumNames<Device> {
  static constexpr std::string_view names[] = {"auto", "cpu", "cuda"};
};
template <>
struct EnumNames<Precision> {
  static constexpr std::string_view names[] = {"fp32", "tf32", "bf16"};
};
template <>
struct EnumNames<DataOnDevice> {
  static constexpr std::string_view names[] = {"auto", "true", "false"};
};
template <>
struct EnumNames<OptimizerKind> {
  static constexpr std::string_view names[] = {"sgd", "momentum"};
};
template <>
struct EnumNames<NodeScaling> {
  static constexpr std::string_view names[] = {"none", "linear", "sqrt"};
};
template <>
struct EnumNames<Schedule> {
  static constexpr std::string_view names[] = {"constant", "step", "cosine"};
};
template <>
struct EnumNames<ShardMode> {
  static constexpr std::string_view names[] = {"node", "none"};
};
template <>
struct EnumNames<ShardMethod> {
  static constexpr std::string_view names[] = {"contiguous", "permutation"};
};
template <>
struct EnumNames<LogFormat> {
  static constexpr std::string_view names[] = {"text", "json"};
};
template <>
struct EnumNames<LogLevel> {
  static constexpr std::string_view names[] = {"trace", "debug", "info", "warn", "error"};
};
template <>
struct EnumNames<LayerType> {
  static constexpr std::string_view names[] = {"dense",   "relu",    "conv2d",
                                               "maxpool", "flatten", "softmax_cross_entropy"};
};

template <NamedEnum E>
constexpr std::string_view to_string(E value) {
  return EnumNames<E>::names[static_cast<std::size_t>(value)];
}

// The value spelled `name`, exactly (case matters); nullopt if there is none.
template <NamedEnum E>
constexpr std::optional<E> parse_enum(std::string_view name) {
  for (std::size_t i = 0; i < std::size(EnumNames<E>::names); ++i)
    if (EnumNames<E>::names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}

}  // namespace gridtrain::config
