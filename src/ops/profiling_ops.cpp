// ProfilingOps' bookkeeping (the forwarding is inline in the header).
#include "ops/profiling_ops.h"

#include <algorithm>

namespace dsv4 {

std::vector<ProfilingOps::Entry> ProfilingOps::entries() const {
  std::vector<Entry> out;
  for (const auto& [op, e] : totals_) out.push_back(e);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.seconds > b.seconds; });
  return out;
}

std::string ProfilingOps::op_name(const char* op, const Weight* w) {
  if (w == nullptr) return op;
  std::string name = w->name;
  if (name.starts_with("layers.")) {
    const size_t dot = name.find('.', 7);
    if (dot != std::string::npos) name = name.substr(dot + 1);
  }
  if (name.ends_with(".weight")) name.resize(name.size() - 7);
  return std::string(op) + " " + name;
}

void ProfilingOps::charge(const std::string& op, std::chrono::steady_clock::time_point start) {
  inner_.synchronize();
  Entry& e = totals_[op];
  e.op = op;
  ++e.calls;
  e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace dsv4
