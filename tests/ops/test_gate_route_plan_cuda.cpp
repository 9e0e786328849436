// kernels::gate_route_plan (a decode batch's MoE gate, routing and plan in one launch) against the
// three launches it replaces on the same inputs: kernels::bf16_mma_gemm's logits, kernels::moe_route's
// experts and weights and kernels::expert_plan's plan, bit for bit, at V4-Flash's geometry (256
// experts, top-6, d = 4096) and smaller ones, every scoring, hash routing, and a second call (the
// kernel's counters reset). Skips where no GPU exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/numeric.h"
#include "kernels/gemm/bf16_mma_gemm.h"
#include "kernels/moe/expert_plan.h"
#include "kernels/moe/gate_route_plan.h"
#include "kernels/moe/moe_route.h"
#include "tests/ops/cuda_test_util.h"

namespace dsv4 {
namespace {

using testing::DeviceBuffer;

enum class Hash { kNone, kI32, kI64 };

struct RouteCase {
  int64_t tokens, experts, k, d;
  kernels::RouteScoring scoring;
  bool bias;
  Hash hash;
  int32_t tile_rows;
};

std::string route_case_name(const ::testing::TestParamInfo<RouteCase>& info) {
  const RouteCase& c = info.param;
  const char* scorings[] = {"sqrtsoftplus", "sigmoid", "softmax"};
  const char* hashes[] = {"", "_hash32", "_hash64"};
  return "t" + std::to_string(c.tokens) + "_e" + std::to_string(c.experts) + "_k" + std::to_string(c.k) + "_d" +
         std::to_string(c.d) + "_" + scorings[static_cast<int>(c.scoring)] + (c.bias ? "_bias" : "") +
         hashes[static_cast<int>(c.hash)] + "_tile" + std::to_string(c.tile_rows);
}

// One routing's outputs on the device: logits, experts, weights and the plan's arrays.
struct RouteOutputs {
  int64_t tokens, experts, k, max_tiles;
  DeviceBuffer<float> logits, weights, row_weight;
  DeviceBuffer<int32_t> ids, count, offset, span, src, row_of, tile_count, fault;
  DeviceBuffer<kernels::Fp8MmaTile> tiles;
  RouteOutputs(int64_t t, int64_t e, int64_t k_, int32_t tile_rows)
      : tokens(t), experts(e), k(k_), max_tiles(kernels::expert_plan_max_tiles(t * k_, static_cast<int32_t>(e), tile_rows)),
        logits(static_cast<size_t>(t * e)), weights(static_cast<size_t>(t * k_)), row_weight(static_cast<size_t>(t * k_)),
        ids(static_cast<size_t>(t * k_)), count(static_cast<size_t>(e)), offset(static_cast<size_t>(e)),
        span(static_cast<size_t>(kernels::expert_plan_spans(t * k_) * e)), src(static_cast<size_t>(t * k_)),
        row_of(static_cast<size_t>(t * k_)), tile_count(1), fault(2), tiles(static_cast<size_t>(max_tiles)) {}

  void poison() {
    logits.poison();
    weights.poison();
    row_weight.poison();
    for (auto* b : {&ids, &count, &offset, &span, &src, &row_of, &tile_count}) b->poison();
    tiles.poison();
    fault.upload({0, 0});
  }

  kernels::ExpertPlanParams plan(int32_t tile_rows) {
    kernels::ExpertPlanParams p;
    p.experts = ids.get();
    p.weights = weights.get();
    p.pairs = tokens * k;
    p.k = static_cast<int32_t>(k);
    p.num_experts = static_cast<int32_t>(experts);
    p.tile_rows = tile_rows;
    p.count = count.get();
    p.offset = offset.get();
    p.span_count = span.get();
    p.src_token = src.get();
    p.row_weight = row_weight.get();
    p.row_of = row_of.get();
    p.tiles = tiles.get();
    p.tile_count = tile_count.get();
    p.max_tiles = max_tiles;
    p.fault = fault.get();
    return p;
  }
};

// Bit equality of two float arrays (NaN payloads included).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_same(const RouteOutputs& got, const RouteOutputs& want, const std::string& what) {
  EXPECT_TRUE(same_bits(got.logits.download(), want.logits.download())) << what << ": logits";
  EXPECT_EQ(got.ids.download(), want.ids.download()) << what << ": experts";
  EXPECT_TRUE(same_bits(got.weights.download(), want.weights.download())) << what << ": weights";
  EXPECT_EQ(got.count.download(), want.count.download()) << what << ": count";
  EXPECT_EQ(got.offset.download(), want.offset.download()) << what << ": offset";
  EXPECT_EQ(got.src.download(), want.src.download()) << what << ": src_token";
  EXPECT_TRUE(same_bits(got.row_weight.download(), want.row_weight.download())) << what << ": row_weight";
  EXPECT_EQ(got.row_of.download(), want.row_of.download()) << what << ": row_of";
  const int32_t tiles = want.tile_count.download()[0];
  ASSERT_EQ(got.tile_count.download()[0], tiles) << what;
  const std::vector<kernels::Fp8MmaTile> a = got.tiles.download(), b = want.tiles.download();
  for (int32_t i = 0; i < tiles; ++i) {
    EXPECT_EQ(a[static_cast<size_t>(i)].group, b[static_cast<size_t>(i)].group) << what << ": tile " << i;
    EXPECT_EQ(a[static_cast<size_t>(i)].row_begin, b[static_cast<size_t>(i)].row_begin) << what << ": tile " << i;
    EXPECT_EQ(a[static_cast<size_t>(i)].rows, b[static_cast<size_t>(i)].rows) << what << ": tile " << i;
  }
  EXPECT_EQ(got.fault.download()[0], 0) << what;
}

class GateRoutePlanTest : public ::testing::TestWithParam<RouteCase> {};

TEST_P(GateRoutePlanTest, GivesTheBitsOfGemmRouteAndPlan) {
  DSV4_SKIP_WITHOUT_GPU();
  const RouteCase c = GetParam();
  const int64_t T = c.tokens, E = c.experts, k = c.k, D = c.d, vocab = 50;
  std::mt19937 rng(static_cast<uint32_t>(T * 131 + E * 7 + k));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> x(static_cast<size_t>(T * D)), w(static_cast<size_t>(E * D));
  for (auto& v : x) v = float_to_bf16(normal(rng));
  for (auto& v : w) v = float_to_bf16(0.05f * normal(rng));
  std::vector<float> bias(static_cast<size_t>(E));
  for (auto& v : bias) v = 0.1f * normal(rng);
  // Hash routing: k distinct experts per vocabulary entry, and in-vocabulary token ids.
  std::vector<int32_t> t2e32(static_cast<size_t>(vocab * k)), token_ids(static_cast<size_t>(T));
  std::vector<int64_t> t2e64(t2e32.size());
  std::vector<int32_t> all(static_cast<size_t>(E));
  std::iota(all.begin(), all.end(), 0);
  for (int64_t v = 0; v < vocab; ++v) {
    std::shuffle(all.begin(), all.end(), rng);
    for (int64_t j = 0; j < k; ++j) t2e32[static_cast<size_t>(v * k + j)] = t2e64[static_cast<size_t>(v * k + j)] = all[static_cast<size_t>(j)];
  }
  std::uniform_int_distribution<int32_t> any_token(0, static_cast<int32_t>(vocab - 1));
  for (auto& id : token_ids) id = any_token(rng);

  DeviceBuffer<uint16_t> dx(x.size()), dw(w.size());
  DeviceBuffer<float> dbias(bias.size());
  DeviceBuffer<int32_t> d_t2e32(t2e32.size()), d_tokens(token_ids.size());
  DeviceBuffer<int64_t> d_t2e64(t2e64.size());
  dx.upload(x);
  dw.upload(w);
  dbias.upload(bias);
  d_t2e32.upload(t2e32);
  d_t2e64.upload(t2e64);
  d_tokens.upload(token_ids);

  const auto route_of = [&](RouteOutputs& o) {
    kernels::MoeRouteParams r;
    r.logits = o.logits.get();
    if (c.bias) r.bias = {dbias.get(), false};
    if (c.hash != Hash::kNone) {
      r.tid2eid = c.hash == Hash::kI64 ? static_cast<const void*>(d_t2e64.get()) : d_t2e32.get();
      r.tid2eid_i64 = c.hash == Hash::kI64;
      r.vocab = vocab;
      r.token_ids = d_tokens.get();
    }
    r.scoring = c.scoring;
    r.route_scale = 1.5f;
    r.experts = o.ids.get();
    r.weights = o.weights.get();
    r.tokens = T;
    r.num_experts = E;
    r.k = k;
    return r;
  };

  // The three launches.
  RouteOutputs want(T, E, k, c.tile_rows);
  want.poison();
  kernels::Bf16MmaGemmParams gemm{dx.get(), D, dw.get(), {want.logits.get(), false}, E, T, E, D, {}};
  kernels::bf16_mma_gemm(gemm, nullptr);
  kernels::moe_route(route_of(want), nullptr);
  kernels::expert_plan(want.plan(c.tile_rows), nullptr);
  DSV4_CUDA_CHECK(cudaDeviceSynchronize());

  // The one launch, twice (the second after its own counters were reset by the first).
  DeviceBuffer<float> partials(static_cast<size_t>(kernels::gate_route_plan_partial_floats(E, D)));
  DeviceBuffer<unsigned> done(static_cast<size_t>(kernels::gate_route_plan_counters(E)));
  done.upload(std::vector<unsigned>(done.size(), 0u));
  RouteOutputs got(T, E, k, c.tile_rows);
  for (int call = 0; call < 2; ++call) {
    got.poison();
    kernels::GateRoutePlanParams p;
    p.x = dx.get();
    p.ldx = D;
    p.w = dw.get();
    p.d = D;
    p.logits = got.logits.get();
    p.route = route_of(got);
    p.plan = got.plan(c.tile_rows);
    p.partials = partials.get();
    p.done = done.get();
    ASSERT_TRUE(kernels::gate_route_plan_supports(p));
    kernels::gate_route_plan(p, nullptr);
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    expect_same(got, want, "call " + std::to_string(call + 1));
    EXPECT_EQ(done.download(), std::vector<unsigned>(done.size(), 0u)) << "counters after call " << call + 1;
  }
}

using kernels::RouteScoring;

// V4-Flash's MoE at batch 1, 3 and 8 (score routing with the bias, hash routing with i64 ids),
// a gate of rows not a multiple of 16 and K blocks not a multiple of 8, sigmoid and softmax
// scoring, and the tiny preset's 8 experts (half a row block).
INSTANTIATE_TEST_SUITE_P(
    Routings, GateRoutePlanTest,
    ::testing::Values(RouteCase{1, 256, 6, 4096, RouteScoring::kSqrtSoftplus, true, Hash::kNone, 8},
                      RouteCase{8, 256, 6, 4096, RouteScoring::kSqrtSoftplus, true, Hash::kNone, 8},
                      RouteCase{3, 256, 6, 4096, RouteScoring::kSqrtSoftplus, false, Hash::kI64, 8},
                      RouteCase{4, 200, 6, 1152, RouteScoring::kSqrtSoftplus, true, Hash::kI32, 16},
                      RouteCase{5, 64, 8, 1024, RouteScoring::kSigmoid, true, Hash::kNone, 16},
                      RouteCase{2, 32, 4, 512, RouteScoring::kSoftmax, false, Hash::kNone, 8},
                      RouteCase{6, 8, 2, 512, RouteScoring::kSqrtSoftplus, true, Hash::kNone, 8}),
    route_case_name);

// Calls the kernel does not take are refused before launch, with the operands named.
TEST(GateRoutePlan, RefusesWhatItDoesNotTake) {
  kernels::GateRoutePlanParams p;
  p.route.tokens = kernels::kGateRoutePlanMaxTokens + 1;
  p.route.num_experts = 256;
  p.route.k = 6;
  p.d = 4096;
  p.ldx = 4096;
  EXPECT_FALSE(kernels::gate_route_plan_supports(p));
  try {
    kernels::gate_route_plan(p, nullptr);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("9 tokens"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsv4
