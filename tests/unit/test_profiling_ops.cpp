// ProfilingOps: forwards to the backend unchanged (same results) and counts each op's calls,
// telling linears apart by their weight.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "ops/profiling_ops.h"

namespace dsv4 {
namespace {

TEST(ProfilingOps, ForwardsUnchangedAndCountsEachOp) {
  cpu::CpuOps cpu(1);
  ProfilingOps prof(cpu);
  EXPECT_EQ(prof.name(), "cpu");
  const Weight w = cpu.dummy_weight({"layers.3.attn.wq_a.weight", WeightFormat::kPlain, DType::kF32, {8, 16}, 1, 0, 1});
  const Weight x = cpu.dummy_weight({"x", WeightFormat::kPlain, DType::kF32, {2, 16}, 2, 0, 1});
  const DeviceTensor direct = cpu.alloc(DType::kF32, {2, 8});
  cpu.linear({x.data.view(), &w, ActQuant::kNone, direct.view()});
  const DeviceTensor profiled = prof.alloc(DType::kF32, {2, 8});
  prof.linear({x.data.view(), &w, ActQuant::kNone, profiled.view()});
  prof.linear({x.data.view(), &w, ActQuant::kNone, profiled.view()});
  prof.rms_norm({profiled.view(), nullptr, 1e-6f, profiled.view()});
  cpu.rms_norm({direct.view(), nullptr, 1e-6f, direct.view()});
  const float* a = direct.view().data<float>();
  const float* b = profiled.view().data<float>();
  EXPECT_EQ(std::vector<float>(a, a + 16), std::vector<float>(b, b + 16));

  std::map<std::string, int64_t> calls;
  for (const ProfilingOps::Entry& e : prof.entries()) {
    calls[e.op] = e.calls;
    EXPECT_GE(e.seconds, 0.0);
  }
  EXPECT_EQ(calls, (std::map<std::string, int64_t>{{"alloc", 1}, {"linear attn.wq_a", 2}, {"rms_norm", 1}}));
  prof.reset();
  EXPECT_TRUE(prof.entries().empty());
}

TEST(ProfilingOps, AThrowingOpIsNotChargedAndTheErrorPassesThrough) {
  cpu::CpuOps cpu(1);
  ProfilingOps prof(cpu);
  EXPECT_THROW(prof.alloc(DType::kF32, {-1}), UsageError);
  EXPECT_TRUE(prof.entries().empty());
}

}  // namespace
}  // namespace dsv4
