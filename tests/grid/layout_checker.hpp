#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "grid/layout.hpp"

namespace gridtrain::grid::testing {

// "" when every node shares one of `lines` (in any grouping) with another and the lines join all of `nodes`
// (ascending) into one group, else who is alone or cut off. Independent of Layout's own check: union-find over the
// lines as given.
std::string connected(const std::vector<std::vector<LineState>>& lines, const std::vector<NodeId>& nodes);

// Plays the GridMaster: keeps the lines only as the deltas describe them, and after every operation checks that
// they equal the layout's lines, that the delta was minimal, that `moved` names exactly the nodes whose
// coordinates changed, that the layout's invariants hold, and (every operation up to 256 nodes, then every 61st)
// that the lines it knows of connect everyone.
class LayoutChecker {
 public:
  explicit LayoutChecker(Layout& layout);

  // Each returns "" or the first thing that went wrong.
  std::string add(NodeId node, LayoutDelta* out = nullptr);
  std::string remove(NodeId node, LayoutDelta* out = nullptr);

 private:
  std::string after(const LayoutDelta& delta, NodeId added, NodeId removed);
  std::string apply_lines(const LayoutDelta& delta);
  std::string compare_lines();
  std::string check_connected();
  LineState& shadow(LineId id);
  std::string check_moved(const LayoutDelta& delta, NodeId added, NodeId removed);
  void reload_nodes();

  Layout& layout_;
  std::vector<std::vector<LineState>> lines_;  // [dim][index]: what start_line and stop_line have told
  std::map<NodeId, std::vector<int>> coords_;
  std::map<NodeId, std::array<std::uint64_t, kMaxDims>> line_index_;  // per dimension, from the deltas
  std::uint64_t operations_ = 0;
};

}  // namespace gridtrain::grid::testing
