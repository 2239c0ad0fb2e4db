#include "allreduce/messages.hpp"

namespace gridtrain::allreduce {

std::string_view to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::accepted: return "accepted";
    case Verdict::duplicate: return "duplicate";
    case Verdict::late: return "late";
    case Verdict::stale: return "stale";
    case Verdict::newer: return "newer";
    case Verdict::malformed: return "malformed";
  }
  return "unknown";
}

}  // namespace gridtrain::allreduce
