// kernels::expert_plan against the plan made on the host (expert_plan.h's contract): rows grouped
// by expert in pair order, offsets, tiles and row_of, for the one-block plan of a decode batch and
// the span-parallel plan of a prefill (one span, many spans, a last span cut short), with ids
// outside the experts reported through the fault word. Skips where no GPU exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/fault.h"
#include "kernels/moe/expert_plan.h"
#include "tests/ops/cuda_test_util.h"

namespace dsv4 {
namespace {

using testing::DeviceBuffer;

struct PlanCase {
  int64_t tokens;
  int32_t k, num_experts, tile_rows;
  int64_t bad_ids;  // pairs given an id outside [0, num_experts)
};

std::string plan_case_name(const ::testing::TestParamInfo<PlanCase>& info) {
  const PlanCase& c = info.param;
  return "t" + std::to_string(c.tokens) + "_k" + std::to_string(c.k) + "_e" + std::to_string(c.num_experts) + "_tile" +
         std::to_string(c.tile_rows) + "_bad" + std::to_string(c.bad_ids);
}

class ExpertPlanTest : public ::testing::TestWithParam<PlanCase> {};

TEST_P(ExpertPlanTest, MatchesTheHostPlan) {
  DSV4_SKIP_WITHOUT_GPU();
  const PlanCase c = GetParam();
  const int64_t pairs = c.tokens * c.k;
  const int32_t E = c.num_experts;
  std::mt19937 rng(static_cast<uint32_t>(pairs * 31 + E));
  // Skewed routing (a few hot experts, some never chosen), as a trained router's is.
  std::vector<int32_t> ids(static_cast<size_t>(pairs));
  std::vector<float> weights(static_cast<size_t>(pairs));
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (int64_t r = 0; r < pairs; ++r) {
    const float u = uniform(rng);
    ids[static_cast<size_t>(r)] = static_cast<int32_t>(u * u * static_cast<float>(E - 1));
    weights[static_cast<size_t>(r)] = uniform(rng);
  }
  std::uniform_int_distribution<int64_t> any_pair(0, pairs - 1);
  for (int64_t b = 0; b < c.bad_ids; ++b) ids[static_cast<size_t>(any_pair(rng))] = b % 2 ? E + 3 : -2;

  // The host plan.
  std::vector<int32_t> count(static_cast<size_t>(E), 0), offset(static_cast<size_t>(E), 0);
  for (const int32_t id : ids)
    if (id >= 0 && id < E) ++count[static_cast<size_t>(id)];
  std::vector<int32_t> src_token, row_of(static_cast<size_t>(pairs), -1);
  std::vector<float> row_weight;
  std::vector<kernels::Fp8MmaTile> tiles;
  for (int32_t e = 0, rows = 0; e < E; ++e) {
    offset[static_cast<size_t>(e)] = rows;
    for (int64_t r = 0; r < pairs; ++r)
      if (ids[static_cast<size_t>(r)] == e) {
        row_of[static_cast<size_t>(r)] = static_cast<int32_t>(src_token.size());
        src_token.push_back(static_cast<int32_t>(r / c.k));
        row_weight.push_back(weights[static_cast<size_t>(r)]);
      }
    for (int32_t j = 0; j * c.tile_rows < count[static_cast<size_t>(e)]; ++j)
      tiles.push_back({e, rows + j * c.tile_rows, std::min(c.tile_rows, count[static_cast<size_t>(e)] - j * c.tile_rows)});
    rows += count[static_cast<size_t>(e)];
  }
  const auto placed = static_cast<int64_t>(src_token.size());
  src_token.resize(static_cast<size_t>(pairs), 0);  // unplaced rows: token 0, weight 0
  row_weight.resize(static_cast<size_t>(pairs), 0.0f);

  // The device plan, over poisoned buffers.
  const int64_t max_tiles = kernels::expert_plan_max_tiles(pairs, E, c.tile_rows);
  DeviceBuffer<int32_t> d_ids(ids.size()), d_count(static_cast<size_t>(E)), d_offset(static_cast<size_t>(E)),
      d_span(static_cast<size_t>(kernels::expert_plan_spans(pairs) * E)), d_src(static_cast<size_t>(pairs)),
      d_row_of(static_cast<size_t>(pairs)), d_tile_count(1), d_fault(2);
  DeviceBuffer<float> d_weights(weights.size()), d_row_weight(static_cast<size_t>(pairs));
  DeviceBuffer<kernels::Fp8MmaTile> d_tiles(static_cast<size_t>(max_tiles));
  d_ids.upload(ids);
  d_weights.upload(weights);
  for (auto* b : {&d_count, &d_offset, &d_span, &d_src, &d_row_of, &d_tile_count}) b->poison();
  d_row_weight.poison();
  d_tiles.poison();
  d_fault.upload({0, 0});
  kernels::ExpertPlanParams p;
  p.experts = d_ids.get();
  p.weights = d_weights.get();
  p.pairs = pairs;
  p.k = c.k;
  p.num_experts = E;
  p.tile_rows = c.tile_rows;
  p.count = d_count.get();
  p.offset = d_offset.get();
  p.span_count = d_span.get();
  p.src_token = d_src.get();
  p.row_weight = d_row_weight.get();
  p.row_of = d_row_of.get();
  p.tiles = d_tiles.get();
  p.tile_count = d_tile_count.get();
  p.max_tiles = max_tiles;
  p.fault = d_fault.get();
  kernels::expert_plan(p, nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());

  EXPECT_EQ(d_count.download(), count);
  EXPECT_EQ(d_offset.download(), offset);
  EXPECT_EQ(d_src.download(), src_token);
  EXPECT_EQ(d_row_weight.download(), row_weight);
  EXPECT_EQ(d_row_of.download(), row_of);
  ASSERT_EQ(d_tile_count.download()[0], static_cast<int32_t>(tiles.size()));
  const std::vector<kernels::Fp8MmaTile> got = d_tiles.download();
  for (size_t i = 0; i < tiles.size(); ++i) {
    EXPECT_EQ(got[i].group, tiles[i].group) << "tile " << i;
    EXPECT_EQ(got[i].row_begin, tiles[i].row_begin) << "tile " << i;
    EXPECT_EQ(got[i].rows, tiles[i].rows) << "tile " << i;
  }
  const std::vector<int32_t> fault = d_fault.download();
  if (c.bad_ids > 0) {
    EXPECT_EQ(fault[0], kernels::kFaultExpertId);
    EXPECT_TRUE(fault[1] == -2 || fault[1] == E + 3) << fault[1];
  } else {
    EXPECT_EQ(fault[0], 0);
  }
  EXPECT_EQ(placed + std::count(row_of.begin(), row_of.end(), -1), pairs);
}

// A decode batch (the one-block plan), a prefill of one span and of many (V4-Flash's 256 experts,
// top-6: 8k tokens are 24 spans), a last span cut short, and ids outside the experts.
INSTANTIATE_TEST_SUITE_P(Plans, ExpertPlanTest,
                         ::testing::Values(PlanCase{64, 6, 256, 8, 0}, PlanCase{300, 6, 256, 128, 0},
                                           PlanCase{8192, 6, 256, 128, 0}, PlanCase{1001, 6, 256, 32, 0},
                                           PlanCase{3000, 6, 256, 128, 5}, PlanCase{100, 6, 256, 16, 3},
                                           PlanCase{5000, 8, 64, 128, 0}),
                         plan_case_name);

}  // namespace
}  // namespace dsv4
