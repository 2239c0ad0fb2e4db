#pragma once
// The enum-valued settings, and the YAML spelling of each value.

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace gridtrain::config {

enum class QuorumMode { fraction, timeout };
enum class LearnerKind { model, probe };
enum class Device { automatic, cpu, cuda };
enum class OptimizerKind { sgd, momentum };
enum class Schedule { constant, step, cosine };
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

// clang-format off
template <> struct EnumNames<QuorumMode> { static constexpr std::array<std::string_view, 2> names{"fraction", "timeout"}; };
template <> struct EnumNames<LearnerKind> { static constexpr std::array<std::string_view, 2> names{"model", "probe"}; };
template <> struct EnumNames<Device> { static constexpr std::array<std::string_view, 3> names{"auto", "cpu", "cuda"}; };
template <> struct EnumNames<OptimizerKind> { static constexpr std::array<std::string_view, 2> names{"sgd", "momentum"}; };
template <> struct EnumNames<Schedule> { static constexpr std::array<std::string_view, 3> names{"constant", "step", "cosine"}; };
template <> struct EnumNames<ShardMode> { static constexpr std::array<std::string_view, 2> names{"node", "none"}; };
template <> struct EnumNames<ShardMethod> { static constexpr std::array<std::string_view, 2> names{"contiguous", "permutation"}; };
template <> struct EnumNames<LogFormat> { static constexpr std::array<std::string_view, 2> names{"text", "json"}; };
template <> struct EnumNames<LogLevel> { static constexpr std::array<std::string_view, 5> names{"trace", "debug", "info", "warn", "error"}; };
template <> struct EnumNames<LayerType> {
  static constexpr std::array<std::string_view, 6> names{"dense", "relu", "conv2d", "maxpool", "flatten", "softmax_cross_entropy"};
};
// clang-format on

template <NamedEnum E>
constexpr std::string_view to_string(E value) {
  return EnumNames<E>::names[static_cast<std::size_t>(value)];
}

// The value spelled `name`, exactly (case matters); nullopt if there is none.
template <NamedEnum E>
constexpr std::optional<E> parse_enum(std::string_view name) {
  for (std::size_t i = 0; i < EnumNames<E>::names.size(); ++i)
    if (EnumNames<E>::names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}

}  // namespace gridtrain::config
