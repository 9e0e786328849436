// CpuOps against hand-computed values and straightforward naive loops (double precision) of the
// formulas in MODEL.md: norms, RoPE, QAT rounding, Hadamard, mHC with Sinkhorn, linears with FP8
// activation quantisation, the compressor's pooling (overlap, j = 0, state across calls), the
// indexer's causal mask and top-k, sink attention, SwiGLU clamp, routing and the experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/quant.h"
#include "sampling/logit_edit.h"
#include "sampling/token_draw.h"
#include "cpu_forwarding_ops.h"
#include "cpu_test_util.h"

namespace dsv4::cpu {
namespace {

using dsv4::testing::make_ints;
using dsv4::testing::make_tensor;
using dsv4::testing::make_weight;
using dsv4::testing::max_rel_error;
using dsv4::testing::one_page_cache;
using dsv4::testing::OnePageCache;
using dsv4::testing::random_floats;
using dsv4::testing::same_bits;
using dsv4::testing::to_floats;
using dsv4::testing::to_ints;

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

class CpuOpsTest : public ::testing::Test {
 protected:
  CpuOps ops{2};
};

// ---- copy_rows --------------------------------------------------------------------------------

// Row ranges of one tensor land in other tensors' rows; nothing else in them changes; a
// destination of another dtype or width, or a range past either end, is refused naming the copy.
TEST_F(CpuOpsTest, CopyRowsWritesEachRangeAndRefusesMisfits) {
  const std::vector<float> src = random_floats(5 * 4, 3);
  const DeviceTensor from = make_tensor(ops, DType::kF32, {5, 4}, src);
  DeviceTensor a = ops.alloc(DType::kF32, {3, 4}), b = ops.alloc(DType::kF32, {6, 4});
  const std::vector<RowCopy> copies = {{0, a.view(), 1, 2}, {2, b.view(), 3, 3}, {4, a.view(), 0, 0}};
  ops.copy_rows({from.view(), copies});
  const std::vector<float> got_a = to_floats(a.view()), got_b = to_floats(b.view());
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 4; ++c)
      EXPECT_EQ(got_a[r * 4 + c], r == 0 ? 0.0f : src[(r - 1) * 4 + c]) << r << "," << c;
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 4; ++c)
      EXPECT_EQ(got_b[r * 4 + c], r < 3 ? 0.0f : src[(r - 1) * 4 + c]) << r << "," << c;

  DeviceTensor narrow = ops.alloc(DType::kF32, {3, 2}), half = ops.alloc(DType::kBF16, {3, 4});
  for (const RowCopy& bad : {RowCopy{0, narrow.view(), 0, 1}, RowCopy{0, half.view(), 0, 1},
                             RowCopy{4, a.view(), 0, 2}, RowCopy{0, a.view(), 2, 2}}) {
    const std::vector<RowCopy> one = {bad};
    try {
      ops.copy_rows({from.view(), one});
      ADD_FAILURE() << "a misfit copy was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("copy_rows: copy 0"), std::string::npos) << e.what();
    }
  }
}

// ---- write_cache_rows -------------------------------------------------------------------------

// Each source row lands in its sequence's cache at the row dst_rows names; -1 rows go nowhere and
// nothing else in the caches changes; a destination past a cache, a cache of another dtype or
// width, and rows outside the source are refused naming the sequence.
TEST_F(CpuOpsTest, WriteCacheRowsPutsEachRowWhereThePlanSays) {
  const std::vector<float> src = random_floats(5 * 4, 4);
  const DeviceTensor from = make_tensor(ops, DType::kF32, {5, 4}, src);
  DeviceTensor a = ops.alloc(DType::kF32, {3, 4}), b = ops.alloc(DType::kF32, {6, 4});
  const DeviceTensor rows = make_ints(ops, {5}, {2, -1, 5, 0, -1});
  const OnePageCache pa = one_page_cache(ops, a), pb = one_page_cache(ops, b);
  const std::vector<CacheRows> seqs = {{0, 2, pa.cache}, {2, 3, pb.cache}};
  ops.write_cache_rows({from.view(), rows.view(), seqs});
  const std::vector<float> got_a = to_floats(a.view()), got_b = to_floats(b.view());
  const auto expect_row = [&](const std::vector<float>& got, int64_t row, int64_t src_row) {
    for (int64_t c = 0; c < 4; ++c)
      EXPECT_EQ(got[row * 4 + c], src_row < 0 ? 0.0f : src[src_row * 4 + c]) << "row " << row << " column " << c;
  };
  expect_row(got_a, 0, -1);
  expect_row(got_a, 1, -1);
  expect_row(got_a, 2, 0);
  expect_row(got_b, 0, 3);
  for (int64_t r = 1; r < 5; ++r) expect_row(got_b, r, -1);
  expect_row(got_b, 5, 2);

  const auto expect_refused = [&](const WriteCacheRowsParams& p, const std::string& says) {
    try {
      ops.write_cache_rows(p);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  const DeviceTensor past = make_ints(ops, {5}, {3, -1, 0, 0, 0});
  expect_refused({from.view(), past.view(), seqs}, "goes to entry 3 of sequence 0's cache, which has no row for it");
  DeviceTensor half = ops.alloc(DType::kBF16, {3, 4});
  const OnePageCache phalf = one_page_cache(ops, half);
  const std::vector<CacheRows> wrong_dtype = {{0, 2, phalf.cache}};
  expect_refused({from.view(), rows.view(), wrong_dtype}, "write_cache_rows: sequence 0: cache pool bf16");
  const std::vector<CacheRows> outside = {{4, 2, pa.cache}};
  expect_refused({from.view(), rows.view(), outside}, "rows [4, 6) are outside the source");
}

// ---- sample_rows ------------------------------------------------------------------------------

// A [rows, 4] i64 tensor of DrawRows, sample_rows' second input.
DeviceTensor draw_rows_tensor(Ops& ops, const std::vector<DrawRow>& rows) {
  DeviceTensor t = ops.alloc(DType::kI64, {static_cast<int64_t>(rows.size()), 4});
  std::memcpy(t.view().bytes(), rows.data(), rows.size() * sizeof(DrawRow));
  return t;
}

// sample_token's greedy choice at temperature 0: the first of equal maxima, NaN skipped unless it
// comes first.
TEST_F(CpuOpsTest, SampleRowsAtTemperatureZeroTakeTheFirstLargestValue) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> rows = {1, 5, 5, 2,      // ties: the first
                                   nan, 9, 1, 1,    // a leading NaN: index 0
                                   1, nan, 7, 7,    // a later NaN is skipped
                                   -inf, -inf, -inf, -inf,
                                   -3, -1, -2, -1};
  const DeviceTensor x = make_tensor(ops, DType::kF32, {5, 4}, rows);
  const DeviceTensor greedy = draw_rows_tensor(ops, std::vector<DrawRow>(5));
  DeviceTensor out = ops.alloc(DType::kI32, {5});
  ops.sample_rows({x.view(), greedy.view(), out.view()});
  EXPECT_EQ(to_ints(out.view()), (std::vector<int32_t>{1, 0, 2, 0, 1}));
  DeviceTensor wrong = ops.alloc(DType::kI32, {4});
  EXPECT_THROW(ops.sample_rows({x.view(), greedy.view(), wrong.view()}), UsageError);
  const DeviceTensor too_few = draw_rows_tensor(ops, std::vector<DrawRow>(4));
  EXPECT_THROW(ops.sample_rows({x.view(), too_few.view(), out.view()}), UsageError);
}

// Sampled rows are draw_token's tokens row by row; a row without a finite largest logit gives -1.
TEST_F(CpuOpsTest, SampleRowsDrawWhatDrawTokenDraws) {
  const int64_t R = 6, V = 300;
  std::vector<float> values = random_floats(R * V, 3, 3.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::fill(values.begin() + 5 * V, values.end(), nan);
  std::vector<DrawRow> rows(R);
  for (int64_t r = 0; r < R; ++r) {
    rows[r].seed = 100 + static_cast<uint64_t>(r);
    rows[r].index = static_cast<uint64_t>(r);
    rows[r].temperature = 0.7f + 0.1f * static_cast<float>(r);
    rows[r].top_k = r % 2 == 0 ? 20 : 0;
    rows[r].top_p = r % 3 == 0 ? 0.9f : 1.0f;
  }
  const DeviceTensor x = make_tensor(ops, DType::kF32, {R, V}, values);
  const DeviceTensor draws = draw_rows_tensor(ops, rows);
  DeviceTensor out = ops.alloc(DType::kI32, {R});
  ops.sample_rows({x.view(), draws.view(), out.view()});
  const std::vector<int32_t> ids = to_ints(out.view());
  for (int64_t r = 0; r < R - 1; ++r) {
    EXPECT_EQ(ids[r], draw_token(values.data() + r * V, V, rows[r])) << "row " << r;
    EXPECT_GE(ids[r], 0);
  }
  EXPECT_EQ(ids[R - 1], -1);
}

// A [E, 6] i32 tensor of LogitEdits, edit_logits' second input.
DeviceTensor logit_edits_tensor(Ops& ops, const std::vector<LogitEdit>& edits) {
  DeviceTensor t = ops.alloc(DType::kI32, {static_cast<int64_t>(edits.size()), 6});
  std::memcpy(t.view().bytes(), edits.data(), edits.size() * sizeof(LogitEdit));
  return t;
}

// Each edit changes its one logit as edited_logit says (bias, then the repetition penalty's
// division or multiplication, then the subtraction; a ban is -inf); the other logits keep their
// values; an edit outside the logits is refused by name.
TEST_F(CpuOpsTest, EditLogitsChangeOnlyTheirTokens) {
  const std::vector<float> values = {1.0f, -2.0f, 3.0f, 0.5f, -1.0f, 4.0f, 2.0f, 8.0f};
  const DeviceTensor x = make_tensor(ops, DType::kF32, {2, 4}, values);
  const std::vector<LogitEdit> edits = {
      {0, 0, 0.5f, 0.0f, 2.0f, LogitEdit::kRepeated},  // (1 + 0.5) / 2
      {0, 1, 0.0f, 0.25f, 2.0f, LogitEdit::kRepeated},  // -2 * 2 - 0.25
      {1, 2, 1.0f, 1.5f, 1.0f, 0},                       // 2 + 1 - 1.5
      {1, 3, 0.0f, 0.0f, 1.0f, LogitEdit::kBanned},
  };
  ops.edit_logits({x.view(), logit_edits_tensor(ops, edits).view()});
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(to_floats(x.view()), (std::vector<float>{0.75f, -4.25f, 3.0f, 0.5f, -1.0f, 4.0f, 1.5f, -inf}));
  const std::vector<LogitEdit> outside = {{2, 0, 1.0f, 0.0f, 1.0f, 0}};
  try {
    ops.edit_logits({x.view(), logit_edits_tensor(ops, outside).view()});
    ADD_FAILURE() << "an edit of row 2 of 2 was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("edit_logits: edit 0 names row 2"), std::string::npos) << e.what();
  }
}

// row_logprobs is draw_row_logprobs row by row, its top lists padded with -1 / NaN; an id outside
// the row (a failed draw) has a NaN logprob and rank 0; a count above the lists' width is refused.
TEST_F(CpuOpsTest, RowLogprobsAreDrawRowLogprobs) {
  const int64_t R = 3, V = 50, N = 4;
  const std::vector<float> values = random_floats(R * V, 8, 2.0f);
  const DeviceTensor x = make_tensor(ops, DType::kF32, {R, V}, values);
  DeviceTensor ids = ops.alloc(DType::kI32, {R}), counts = ops.alloc(DType::kI32, {R});
  const std::vector<int32_t> id_values = {7, 49, -1}, count_values = {4, 2, 3};
  std::memcpy(ids.view().bytes(), id_values.data(), sizeof(int32_t) * R);
  std::memcpy(counts.view().bytes(), count_values.data(), sizeof(int32_t) * R);
  DeviceTensor logprob = ops.alloc(DType::kF32, {R}), rank = ops.alloc(DType::kI32, {R});
  DeviceTensor top_ids = ops.alloc(DType::kI32, {R, N}), top_logprobs = ops.alloc(DType::kF32, {R, N});
  const RowLogprobsParams p{x.view(), ids.view(), counts.view(), logprob.view(), rank.view(), top_ids.view(), top_logprobs.view()};
  ops.row_logprobs(p);
  const std::vector<float> got_logprob = to_floats(logprob.view()), got_top_logprobs = to_floats(top_logprobs.view());
  const std::vector<int32_t> got_rank = to_ints(rank.view()), got_top_ids = to_ints(top_ids.view());
  for (int64_t r = 0; r < 2; ++r) {
    const RowLogprobs want = draw_row_logprobs(values.data() + r * V, V, id_values[r], count_values[r]);
    EXPECT_EQ(got_logprob[r], want.logprob);
    EXPECT_EQ(got_rank[r], want.rank);
    for (int64_t j = 0; j < N; ++j) {
      if (j < count_values[r]) {
        EXPECT_EQ(got_top_ids[r * N + j], want.top_ids[j]);
        EXPECT_EQ(got_top_logprobs[r * N + j], want.top_logprobs[j]);
      } else {
        EXPECT_EQ(got_top_ids[r * N + j], -1);
        EXPECT_TRUE(std::isnan(got_top_logprobs[r * N + j]));
      }
    }
  }
  EXPECT_TRUE(std::isnan(got_logprob[2]));
  EXPECT_EQ(got_rank[2], 0);
  const std::vector<int32_t> too_many = {5, 0, 0};
  std::memcpy(counts.view().bytes(), too_many.data(), sizeof(int32_t) * R);
  EXPECT_THROW(ops.row_logprobs(p), UsageError);
}

// mask_logits sets -inf where a row's mask bit is 0 and leaves the other values and rows alone;
// a row outside the logits or masked twice is refused.
TEST_F(CpuOpsTest, MaskLogitsSetMinusInfinityWhereTheBitIsZero) {
  const int64_t R = 3, V = 40;
  const std::vector<float> values = random_floats(R * V, 6, 1.0f);
  const DeviceTensor x = make_tensor(ops, DType::kF32, {R, V}, values);
  DeviceTensor allowed = ops.alloc(DType::kI32, {1, 2}), rows = ops.alloc(DType::kI32, {1});
  const std::vector<uint32_t> words = {0x0000000Fu, 0x00000080u};  // tokens 0-3 and 39
  std::memcpy(allowed.view().bytes(), words.data(), sizeof(uint32_t) * 2);
  const int32_t row = 1;
  std::memcpy(rows.view().bytes(), &row, sizeof row);
  ops.mask_logits({x.view(), allowed.view(), rows.view()});
  const std::vector<float> got = to_floats(x.view());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < V; ++j) {
      const bool kept = r != 1 || j < 4 || j == 39;
      if (kept) {
        EXPECT_EQ(got[r * V + j], values[r * V + j]) << r << "," << j;
      } else {
        EXPECT_EQ(got[r * V + j], -std::numeric_limits<float>::infinity()) << r << "," << j;
      }
    }
  DeviceTensor twice = ops.alloc(DType::kI32, {2, 2}), twice_rows = ops.alloc(DType::kI32, {2});
  const std::vector<int32_t> same = {0, 0};
  std::memcpy(twice_rows.view().bytes(), same.data(), sizeof(int32_t) * 2);
  EXPECT_THROW(ops.mask_logits({x.view(), twice.view(), twice_rows.view()}), UsageError);
  const int32_t outside = 3;
  std::memcpy(rows.view().bytes(), &outside, sizeof outside);
  EXPECT_THROW(ops.mask_logits({x.view(), allowed.view(), rows.view()}), UsageError);
}

// ---- norms, rope, quantisation, hadamard ----------------------------------------------------

TEST_F(CpuOpsTest, RmsNormMatchesTheFormulaAndRoundsToTheOutputDtype) {
  const int64_t rows = 3, dim = 256;
  const std::vector<float> x = random_floats(rows * dim, 1, 2.0f), w = random_floats(dim, 2);
  const Weight weight = make_weight(ops, w, {dim});
  const DeviceTensor in = make_tensor(ops, DType::kF32, {rows, dim}, x);
  DeviceTensor y32 = ops.alloc(DType::kF32, {rows, dim}), y16 = ops.alloc(DType::kBF16, {rows, dim});
  ops.rms_norm({in.view(), &weight, 1e-6f, y32.view()});
  ops.rms_norm({in.view(), &weight, 1e-6f, y16.view()});
  std::vector<double> ref(rows * dim);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1 / std::sqrt(ss / dim + 1e-6);
    for (int64_t i = 0; i < dim; ++i) ref[r * dim + i] = w[i] * x[r * dim + i] * inv;
  }
  const std::vector<float> got32 = to_floats(y32.view()), got16 = to_floats(y16.view());
  EXPECT_LT(max_rel_error(got32, ref), 1e-6);
  for (size_t i = 0; i < got16.size(); ++i) EXPECT_EQ(got16[i], round_bf16(got32[i])) << i;
}

TEST_F(CpuOpsTest, RopeRotatesInterleavedPairsOfTheLastDimsAndInverseUndoesIt) {
  const int64_t rows = 3, heads = 2, hd = 16, rd = 8;
  const std::vector<float> x = random_floats(rows * heads * hd, 3);
  const std::vector<float> freq = {1.0f, 0.5f, 0.01f, 1e-4f};
  const std::vector<int32_t> pos = {0, 7, 300};
  DeviceTensor t = make_tensor(ops, DType::kF32, {rows, heads, hd}, x);
  const DeviceTensor f = make_tensor(ops, DType::kF32, {rd / 2}, freq);
  const DeviceTensor p = make_ints(ops, {rows}, pos);
  ops.rope({t.view(), p.view(), f.view(), rd, false});
  const std::vector<float> y = to_floats(t.view());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t base = (r * heads + h) * hd;
      for (int64_t i = 0; i < hd - rd; ++i) EXPECT_EQ(y[base + i], x[base + i]) << "nope dim changed";
      for (int64_t i = 0; i < rd / 2; ++i) {
        const double angle = double(float(pos[r]) * freq[i]);
        const double a = x[base + hd - rd + 2 * i], b = x[base + hd - rd + 2 * i + 1];
        EXPECT_NEAR(y[base + hd - rd + 2 * i], a * std::cos(angle) - b * std::sin(angle), 1e-5);
        EXPECT_NEAR(y[base + hd - rd + 2 * i + 1], a * std::sin(angle) + b * std::cos(angle), 1e-5);
      }
    }
  ops.rope({t.view(), p.view(), f.view(), rd, true});
  const std::vector<float> back = to_floats(t.view());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(back[i], x[i], 1e-5) << i;
}

TEST_F(CpuOpsTest, QuantSimRoundsEachBlockOfThePrefixOnly) {
  const int64_t rows = 2, width = 192, cols = 128;
  std::vector<float> x = random_floats(rows * width, 4, 3.0f);
  DeviceTensor t = make_tensor(ops, DType::kF32, {rows, width}, x);
  ops.quant_sim({t.view(), cols, 64, QuantFormat::kE4M3});
  const std::vector<float> y = to_floats(t.view());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols; b += 64) {
      std::vector<float> block(x.begin() + r * width + b, x.begin() + r * width + b + 64);
      float amax = 0;
      for (float v : block) amax = std::max(amax, std::fabs(v));
      const float scale = std::ldexp(1.0f, static_cast<int>(std::ceil(std::log2(amax / 448.0f))));
      for (int64_t i = 0; i < 64; ++i) {
        const float got = y[r * width + b + i];
        EXPECT_EQ(got, round_e4m3(block[i] / scale) * scale) << "row " << r << " col " << b + i;
      }
    }
    for (int64_t i = cols; i < width; ++i) EXPECT_EQ(y[r * width + i], x[r * width + i]) << "col " << i << " changed";
  }
  // FP4: every value lands on the e2m1 grid times the block's pow2 scale.
  DeviceTensor f = make_tensor(ops, DType::kF32, {1, 32}, {x.begin(), x.begin() + 32});
  ops.quant_sim({f.view(), 32, 32, QuantFormat::kE2M1});
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float s4 = std::ldexp(1.0f, static_cast<int>(std::ceil(std::log2(amax / 6.0f))));
  const std::vector<float> y4 = to_floats(f.view());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y4[i], round_e2m1(x[i] / s4) * s4) << i;
}

TEST_F(CpuOpsTest, HadamardIsTheScaledSylvesterMatrix) {
  const int64_t n = 128;
  const std::vector<float> x = random_floats(2 * n, 5);
  DeviceTensor t = make_tensor(ops, DType::kF32, {2, n}, x);
  ops.hadamard({t.view()});
  const std::vector<float> y = to_floats(t.view());
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t i = 0; i < n; ++i) {
      double ref = 0;
      for (int64_t j = 0; j < n; ++j) ref += (std::popcount(uint64_t(i & j)) % 2 ? -1.0 : 1.0) * x[r * n + j];
      EXPECT_NEAR(y[r * n + i], ref / std::sqrt(double(n)), 1e-5) << r << "," << i;
    }
}

// ---- linears --------------------------------------------------------------------------------

TEST_F(CpuOpsTest, Fp8LinearQuantisesActivationsPer128Block) {
  const int64_t M = 3, K = 256, N = 5;
  const std::vector<float> x = random_floats(M * K, 6, 4.0f), w = random_floats(N * K, 7, 0.05f);
  const Weight weight = make_weight(ops, w, {N, K});
  const DeviceTensor in = make_tensor(ops, DType::kF32, {M, K}, x);
  DeviceTensor y = ops.alloc(DType::kF32, {M, N});
  ops.linear({in.view(), &weight, ActQuant::kFp8Block128, y.view()});
  std::vector<float> xq = x;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < K; b += 128) fake_quant_block_e4m3(xq.data() + m * K + b, 128);
  EXPECT_NE(xq, x);
  std::vector<double> ref(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) ref[m * N + n] += double(xq[m * K + k]) * w[n * K + k];
  EXPECT_LT(max_rel_error(to_floats(y.view()), ref), 1e-6);
}

TEST_F(CpuOpsTest, GroupedLinearAppliesEachGroupsBlock) {
  const int64_t T = 3, G = 2, K = 8, R = 4;
  const std::vector<float> x = random_floats(T * G * K, 8), w = random_floats(G * R * K, 9);
  const Weight weight = make_weight(ops, w, {G * R, K});
  const DeviceTensor in = make_tensor(ops, DType::kF32, {T, G, K}, x);
  DeviceTensor y = ops.alloc(DType::kF32, {T, G, R});
  ops.grouped_linear({in.view(), &weight, y.view()});
  std::vector<double> ref(T * G * R);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < G; ++g)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t k = 0; k < K; ++k) ref[(t * G + g) * R + r] += double(w[(g * R + r) * K + k]) * x[(t * G + g) * K + k];
  EXPECT_LT(max_rel_error(to_floats(y.view()), ref), 1e-6);
}

// ---- mHC ------------------------------------------------------------------------------------

// MODEL.md §2.4 in double precision.
struct HcPreRef {
  std::vector<double> y, post, comb;
};
HcPreRef naive_hc_pre(const std::vector<float>& x, int64_t n, int64_t D, const std::vector<float>& fn,
                      const std::vector<float>& scale, const std::vector<float>& base, int iters, double eps) {
  const int64_t mix = (2 + n) * n;
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double rs = 1 / std::sqrt(ss / double(n * D) + 1e-6);
  std::vector<double> m(mix);
  for (int64_t k = 0; k < mix; ++k) {
    for (int64_t i = 0; i < n * D; ++i) m[k] += double(x[i]) * fn[k * n * D + i];
    m[k] *= rs;
  }
  HcPreRef r;
  std::vector<double> pre(n);
  for (int64_t j = 0; j < n; ++j) {
    pre[j] = sigmoid(m[j] * scale[0] + base[j]) + eps;
    r.post.push_back(2 * sigmoid(m[n + j] * scale[1] + base[n + j]));
  }
  std::vector<double> c(n * n);
  for (int64_t k = 0; k < n * n; ++k) c[k] = m[2 * n + k] * scale[2] + base[2 * n + k];
  for (int64_t i = 0; i < n; ++i) {
    double mx = -1e300, sum = 0;
    for (int64_t k = 0; k < n; ++k) mx = std::max(mx, c[i * n + k]);
    for (int64_t k = 0; k < n; ++k) sum += std::exp(c[i * n + k] - mx);
    for (int64_t k = 0; k < n; ++k) c[i * n + k] = std::exp(c[i * n + k] - mx) / sum + eps;
  }
  auto cols = [&] {
    for (int64_t k = 0; k < n; ++k) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += c[i * n + k];
      for (int64_t i = 0; i < n; ++i) c[i * n + k] /= s + eps;
    }
  };
  cols();
  for (int it = 1; it < iters; ++it) {
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t k = 0; k < n; ++k) s += c[i * n + k];
      for (int64_t k = 0; k < n; ++k) c[i * n + k] /= s + eps;
    }
    cols();
  }
  r.comb = c;
  r.y.assign(D, 0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < D; ++d) r.y[d] += pre[j] * x[j * D + d];
  return r;
}

TEST_F(CpuOpsTest, HcPreMatchesTheSinkhornOfTheSpec) {
  const int64_t T = 2, n = 4, D = 64, mix = (2 + n) * n;
  const std::vector<float> x = random_floats(T * n * D, 10), fn = random_floats(mix * n * D, 11, 0.05f);
  const std::vector<float> scale = {0.7f, 1.3f, 2.0f}, base = random_floats(mix, 12);
  const Weight wfn = make_weight(ops, fn, {mix, n * D}), ws = make_weight(ops, scale, {3}), wb = make_weight(ops, base, {mix});
  const DeviceTensor in = make_tensor(ops, DType::kF32, {T, n, D}, x);
  DeviceTensor y = ops.alloc(DType::kF32, {T, D}), post = ops.alloc(DType::kF32, {T, n}), comb = ops.alloc(DType::kF32, {T, n, n});
  ops.hc_pre({in.view(), &wfn, &ws, &wb, 20, 1e-6f, 1e-6f, y.view(), post.view(), comb.view()});
  const std::vector<float> gy = to_floats(y.view()), gp = to_floats(post.view()), gc = to_floats(comb.view());
  for (int64_t t = 0; t < T; ++t) {
    const HcPreRef r = naive_hc_pre({x.begin() + t * n * D, x.begin() + (t + 1) * n * D}, n, D, fn, scale, base, 20, 1e-6);
    EXPECT_LT(max_rel_error({gy.begin() + t * D, gy.begin() + (t + 1) * D}, r.y), 1e-5);
    EXPECT_LT(max_rel_error({gp.begin() + t * n, gp.begin() + (t + 1) * n}, r.post), 1e-5);
    EXPECT_LT(max_rel_error({gc.begin() + t * n * n, gc.begin() + (t + 1) * n * n}, r.comb), 1e-5);
    // The last step is a column normalisation: every column sums to 1 (up to eps).
    for (int64_t k = 0; k < n; ++k) {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += gc[t * n * n + i * n + k];
      EXPECT_NEAR(s, 1.0, 1e-5);
    }
  }
}

TEST_F(CpuOpsTest, HcPreWithTheNormIsHcPreThenRmsNorm) {
  const int64_t T = 3, n = 4, D = 64, mix = (2 + n) * n;
  const std::vector<float> x = random_floats(T * n * D, 20), fn = random_floats(mix * n * D, 21, 0.05f);
  const Weight wfn = make_weight(ops, fn, {mix, n * D}), ws = make_weight(ops, {0.7f, 1.3f, 2.0f}, {3});
  const Weight wb = make_weight(ops, random_floats(mix, 22), {mix}), norm = make_weight(ops, random_floats(D, 23), {D});
  const DeviceTensor in = make_tensor(ops, DType::kBF16, {T, n, D}, x);
  DeviceTensor y = ops.alloc(DType::kBF16, {T, D}), normed = ops.alloc(DType::kBF16, {T, D}), fused = ops.alloc(DType::kBF16, {T, D});
  DeviceTensor post = ops.alloc(DType::kF32, {T, n}), comb = ops.alloc(DType::kF32, {T, n, n});
  ops.hc_pre({in.view(), &wfn, &ws, &wb, 20, 1e-6f, 1e-6f, y.view(), post.view(), comb.view()});
  ops.rms_norm({y.view(), &norm, 1e-6f, normed.view()});
  ops.hc_pre({in.view(), &wfn, &ws, &wb, 20, 1e-6f, 1e-6f, fused.view(), post.view(), comb.view(), &norm});
  EXPECT_EQ(to_floats(fused.view()), to_floats(normed.view()));
  EXPECT_NE(to_floats(fused.view()), to_floats(y.view()));
}

TEST_F(CpuOpsTest, HcPostTakesColumnJOfCombForStreamJ) {
  const int64_t T = 1, n = 4, D = 8;
  const std::vector<float> a = random_floats(D, 13), x = random_floats(n * D, 14);
  const std::vector<float> post = {0.5f, 1.0f, 1.5f, 2.0f};
  std::vector<float> comb(n * n);
  std::iota(comb.begin(), comb.end(), 1.0f);  // comb[i, k] = i*n + k + 1: not symmetric
  const DeviceTensor ta = make_tensor(ops, DType::kF32, {T, D}, a), tx = make_tensor(ops, DType::kF32, {T, n, D}, x);
  const DeviceTensor tp = make_tensor(ops, DType::kF32, {T, n}, post), tc = make_tensor(ops, DType::kF32, {T, n, n}, comb);
  DeviceTensor out = ops.alloc(DType::kF32, {T, n, D});
  ops.hc_post({ta.view(), tx.view(), tp.view(), tc.view(), out.view()});
  std::vector<double> ref(n * D);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < D; ++d) {
      ref[j * D + d] = post[j] * a[d];
      for (int64_t i = 0; i < n; ++i) ref[j * D + d] += double(comb[i * n + j]) * x[i * D + d];
    }
  EXPECT_LT(max_rel_error(to_floats(out.view()), ref), 1e-6);
}

TEST_F(CpuOpsTest, HcHeadWeighsStreamsBySigmoidWithoutSinkhorn) {
  const int64_t T = 1, n = 4, D = 32;
  const std::vector<float> x = random_floats(n * D, 15), fn = random_floats(n * n * D, 16, 0.1f);
  const std::vector<float> scale = {0.9f}, base = {0.1f, -0.2f, 0.3f, 0.0f};
  const Weight wfn = make_weight(ops, fn, {n, n * D}), ws = make_weight(ops, scale, {1}), wb = make_weight(ops, base, {n});
  const DeviceTensor in = make_tensor(ops, DType::kF32, {T, n, D}, x);
  DeviceTensor y = ops.alloc(DType::kF32, {T, D});
  ops.hc_head({in.view(), &wfn, &ws, &wb, 1e-6f, 1e-6f, y.view()});
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double rs = 1 / std::sqrt(ss / (n * D) + 1e-6);
  std::vector<double> ref(D);
  for (int64_t j = 0; j < n; ++j) {
    double m = 0;
    for (int64_t i = 0; i < n * D; ++i) m += double(x[i]) * fn[j * n * D + i];
    const double g = sigmoid(m * rs * scale[0] + base[j]) + 1e-6;
    for (int64_t d = 0; d < D; ++d) ref[d] += g * x[j * D + d];
  }
  EXPECT_LT(max_rel_error(to_floats(y.view()), ref), 1e-5);
}

// ---- compressor -----------------------------------------------------------------------------

// Pooled entries of one sequence of `len` tokens from position 0 (MODEL.md §4.2), in double.
std::vector<double> naive_pool(const std::vector<float>& kv, const std::vector<float>& score, const std::vector<float>& ape,
                               int64_t len, int64_t m, int64_t dc) {
  const bool overlap = m == 4;
  const int64_t width = overlap ? 2 * dc : dc;
  std::vector<double> out;
  for (int64_t j = 0; (j + 1) * m <= len; ++j) {
    for (int64_t c = 0; c < dc; ++c) {
      std::vector<std::pair<double, double>> rows;  // (score, kv)
      if (overlap && j > 0)
        for (int64_t t = (j - 1) * m; t < j * m; ++t)
          rows.push_back({double(score[t * width + c]) + ape[(t % m) * width + c], kv[t * width + c]});
      const int64_t off = overlap ? dc : 0;
      for (int64_t t = j * m; t < (j + 1) * m; ++t)
        rows.push_back({double(score[t * width + off + c]) + ape[(t % m) * width + off + c], kv[t * width + off + c]});
      double mx = -1e300, sum = 0, acc = 0;
      for (auto& r : rows) mx = std::max(mx, r.first);
      for (auto& r : rows) sum += std::exp(r.first - mx);
      for (auto& r : rows) acc += std::exp(r.first - mx) / sum * r.second;
      out.push_back(acc);
    }
  }
  return out;
}

// Positions start, start + 1, ... of n tokens, as ops take them.
DeviceTensor consecutive_positions(Ops& ops, int64_t start, int64_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), static_cast<int32_t>(start));
  return make_ints(ops, {n}, p);
}

class CompressorTest : public CpuOpsTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CompressorTest, PoolsBlocksWithOverlapAndCarriesStateAcrossCalls) {
  const int64_t m = GetParam(), dc = 8, coff = m == 4 ? 2 : 1, width = coff * dc;
  const int64_t len = m == 4 ? 23 : 2 * m + 5;
  const std::vector<float> kv = random_floats(len * width, 20), score = random_floats(len * width, 21, 2.0f);
  const std::vector<float> ape = random_floats(m * width, 22);
  const Weight wape = make_weight(ops, ape, {m, width});
  const std::vector<double> ref = naive_pool(kv, score, ape, len, m, dc);
  const int64_t entries = len / m, rows = (len + m - 1) / m;
  ASSERT_EQ(static_cast<int64_t>(ref.size()), entries * dc);
  ASSERT_EQ(rows, entries + 1);  // the last block row is one the sequence does not complete

  // One call over the whole sequence: the completed blocks, then a row of zeros.
  DeviceTensor skv = ops.alloc(DType::kF32, {coff * m, width}), ssc = ops.alloc(DType::kF32, {coff * m, width});
  const DeviceTensor tkv = make_tensor(ops, DType::kF32, {len, width}, kv), tsc = make_tensor(ops, DType::kF32, {len, width}, score);
  DeviceTensor out = make_tensor(ops, DType::kF32, {rows, dc}, std::vector<float>(rows * dc, 7.0f));
  const CompressorSeq whole{{0, len, 0}, skv.view(), ssc.view(), 0};
  ops.compressor_pool({tkv.view(), tsc.view(), &wape, m, consecutive_positions(ops, 0, len).view(), {&whole, 1}, out.view()});
  const std::vector<float> all_rows = to_floats(out.view());
  const std::vector<float> one_shot(all_rows.begin(), all_rows.begin() + entries * dc);
  EXPECT_LT(max_rel_error(one_shot, ref), 1e-5);
  EXPECT_EQ(std::vector<float>(all_rows.begin() + entries * dc, all_rows.end()), std::vector<float>(dc, 0.0f));

  // Token by token with the state carried in the rings: the same bits.
  DeviceTensor skv2 = ops.alloc(DType::kF32, {coff * m, width}), ssc2 = ops.alloc(DType::kF32, {coff * m, width});
  std::vector<float> stepped;
  for (int64_t t = 0; t < len; ++t) {
    const int64_t emitted = (t + 1) % m == 0 ? 1 : 0;
    const DeviceTensor k1 = make_tensor(ops, DType::kF32, {1, width}, {kv.begin() + t * width, kv.begin() + (t + 1) * width});
    const DeviceTensor s1 = make_tensor(ops, DType::kF32, {1, width}, {score.begin() + t * width, score.begin() + (t + 1) * width});
    DeviceTensor o1 = ops.alloc(DType::kF32, {1, dc});
    const CompressorSeq step{{0, 1, t}, skv2.view(), ssc2.view(), 0};
    ops.compressor_pool({k1.view(), s1.view(), &wape, m, consecutive_positions(ops, t, 1).view(), {&step, 1}, o1.view()});
    const std::vector<float> got = to_floats(o1.view());
    if (emitted == 1) stepped.insert(stepped.end(), got.begin(), got.end());
    else EXPECT_EQ(got, std::vector<float>(dc, 0.0f)) << "position " << t;
  }
  EXPECT_TRUE(same_bits(stepped, one_shot));
}

INSTANTIATE_TEST_SUITE_P(Ratios, CompressorTest, ::testing::Values(4, 128));

TEST_F(CpuOpsTest, FirstOverlappingBlockPoolsOnlyItsOwnRows) {
  // j = 0 with overlap: the "previous block" half is absent, so with equal scores the entry is
  // the mean of the four tokens' second halves.
  const int64_t m = 4, dc = 2, width = 4;
  std::vector<float> kv(4 * width), score(4 * width, 0.0f), ape(m * width, 0.0f);
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t c = 0; c < width; ++c) kv[t * width + c] = c < dc ? 100.0f : float(t + c);
  const Weight wape = make_weight(ops, ape, {m, width});
  DeviceTensor skv = ops.alloc(DType::kF32, {8, width}), ssc = ops.alloc(DType::kF32, {8, width});
  const DeviceTensor tkv = make_tensor(ops, DType::kF32, {4, width}, kv), tsc = make_tensor(ops, DType::kF32, {4, width}, score);
  DeviceTensor out = ops.alloc(DType::kF32, {1, dc});
  const CompressorSeq s{{0, 4, 0}, skv.view(), ssc.view(), 0};
  ops.compressor_pool({tkv.view(), tsc.view(), &wape, m, consecutive_positions(ops, 0, 4).view(), {&s, 1}, out.view()});
  const std::vector<float> got = to_floats(out.view());
  EXPECT_FLOAT_EQ(got[0], (2 + 3 + 4 + 5) / 4.0f);
  EXPECT_FLOAT_EQ(got[1], (3 + 4 + 5 + 6) / 4.0f);
}

// ---- indexer --------------------------------------------------------------------------------

TEST_F(CpuOpsTest, IndexerSeesOnlyCompleteBlocksAndKeepsTheTopScoresAscending) {
  // One head, dh = 4, keys along unit vectors so q . k_j = q[j % 4] * scale_j; weight 1.
  const int64_t T = 20, dh = 4, k = 3, entries = 5;
  std::vector<float> keys(entries * dh, 0.0f);
  const float key_scale[entries] = {1.0f, 5.0f, 3.0f, 4.0f, 2.0f};
  for (int64_t j = 0; j < entries; ++j) keys[j * dh + j % dh] = key_scale[j];
  const DeviceTensor tk = make_tensor(ops, DType::kF32, {8, dh}, [&] {
    std::vector<float> v(8 * dh, 0.0f);
    std::copy(keys.begin(), keys.end(), v.begin());
    return v;
  }());
  const DeviceTensor q = make_tensor(ops, DType::kF32, {T, 1, dh}, std::vector<float>(T * dh, 1.0f));
  const DeviceTensor w = make_tensor(ops, DType::kF32, {T, 1}, std::vector<float>(T, 1.0f));
  DeviceTensor topk = ops.alloc(DType::kI32, {T, k});
  const OnePageCache keys_cache = one_page_cache(ops, tk);
  const IndexerSeq seq{{0, T, 0}, keys_cache.cache};
  ops.indexer_topk({q.view(), w.view(), 1.0f, 4, consecutive_positions(ops, 0, T).view(), {&seq, 1}, topk.view()});
  const std::vector<int32_t> got = to_ints(topk.view());
  for (int64_t p = 0; p < T; ++p) {
    const int64_t visible = (p + 1) / 4;
    std::vector<int32_t> ids(visible);
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return key_scale[a] > key_scale[b]; });
    ids.resize(std::min<int64_t>(visible, k));
    std::sort(ids.begin(), ids.end());
    ids.resize(k, -1);
    EXPECT_EQ(std::vector<int32_t>(got.begin() + p * k, got.begin() + (p + 1) * k), ids) << "position " << p;
  }
}

TEST_F(CpuOpsTest, IndexerScoreIsTheReluWeightedHeadSum) {
  // Two heads with opposite signs: relu drops the negative dot product, weights scale the rest.
  const int64_t dh = 2;
  const DeviceTensor keys = make_tensor(ops, DType::kF32, {2, dh}, {1, 0, 0, 1});
  // Head 0 likes key 0 (+3) and dislikes key 1 (-10); head 1 likes key 1 (+1).
  const DeviceTensor q = make_tensor(ops, DType::kF32, {1, 2, dh}, {3, -10, 0, 1});
  const OnePageCache keys_cache = one_page_cache(ops, keys);
  const IndexerSeq seq{{0, 1, 7}, keys_cache.cache};  // position 7: both entries complete
  for (const auto& [w0, w1, winner] : std::vector<std::tuple<float, float, int>>{{1, 1, 0}, {1, 4, 1}}) {
    const DeviceTensor w = make_tensor(ops, DType::kF32, {1, 2}, {w0, w1});
    DeviceTensor topk = ops.alloc(DType::kI32, {1, 1});
    ops.indexer_topk({q.view(), w.view(), 0.5f, 4, consecutive_positions(ops, 7, 1).view(), {&seq, 1}, topk.view()});
    EXPECT_EQ(to_ints(topk.view())[0], winner) << "weights " << w0 << ", " << w1;
  }
}

// ---- attention ------------------------------------------------------------------------------

TEST_F(CpuOpsTest, SparseAttentionIsASoftmaxWithASinkOverWindowAndEntries) {
  const int64_t H = 2, d = 8, W = 3, T = 2, start = 4, ratio = 2;
  const std::vector<float> q = random_floats(T * H * d, 30), kv = random_floats(T * d, 31);
  const std::vector<float> ring = random_floats(W * d, 32), comp = random_floats(3 * d, 33);
  const std::vector<float> sink = {0.5f, -1.0f};
  const Weight wsink = make_weight(ops, sink, {H});
  const DeviceTensor tq = make_tensor(ops, DType::kF32, {T, H, d}, q), tkv = make_tensor(ops, DType::kF32, {T, d}, kv);
  const DeviceTensor tring = make_tensor(ops, DType::kF32, {W, d}, ring), tcomp = make_tensor(ops, DType::kF32, {3, d}, comp);
  const DeviceTensor topk = make_ints(ops, {T, 2}, {1, -1, 0, 2});
  const OnePageCache comp_cache = one_page_cache(ops, tcomp);
  const AttentionSeq seq{{0, T, start}, tring.view(), comp_cache.cache};
  DeviceTensor out = ops.alloc(DType::kF32, {T, H, d});
  const float scale = 0.3f;
  ops.sparse_attention({tq.view(), tkv.view(), &wsink, topk.view(), consecutive_positions(ops, start, T).view(), {&seq, 1},
                        W, ratio, scale, out.view()});
  const std::vector<float> got = to_floats(out.view());
  // Token 0 at p=4: window 2,3 (ring rows 2, 0) and itself; entry 1. Token 1 at p=5: window 3,4,5
  // (ring row 0, kv 0, kv 1); entries 0 and 2.
  const std::vector<std::vector<const float*>> entries = {
      {&ring[2 * d], &ring[0], &kv[0], &comp[1 * d]},
      {&ring[0], &kv[0], &kv[d], &comp[0], &comp[2 * d]}};
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      std::vector<double> z;
      for (const float* e : entries[t]) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += double(q[(t * H + h) * d + c]) * e[c];
        z.push_back(dot * scale);
      }
      double den = std::exp(double(sink[h]));
      for (double v : z) den += std::exp(v);
      std::vector<double> ref(d, 0.0);
      for (size_t e = 0; e < z.size(); ++e)
        for (int64_t c = 0; c < d; ++c) ref[c] += std::exp(z[e]) / den * entries[t][e][c];
      EXPECT_LT(max_rel_error({got.begin() + (t * H + h) * d, got.begin() + (t * H + h + 1) * d}, ref), 1e-5)
          << "token " << t << " head " << h;
    }
}

TEST_F(CpuOpsTest, DenseCompressedAttentionUsesEveryCompleteBlock) {
  // HCA (no topk): at p = 5 with ratio 2, entries 0..2 are visible; with equal dots and a -inf
  // sink the output is the mean of the window and the entries.
  const int64_t H = 1, d = 4, W = 2;
  const std::vector<float> q(d, 0.0f), kv = {1, 1, 1, 1};
  const std::vector<float> ring = {2, 2, 2, 2, 3, 3, 3, 3}, comp = {10, 10, 10, 10, 20, 20, 20, 20, 30, 30, 30, 30, 99, 99, 99, 99};
  const Weight wsink = make_weight(ops, {-INFINITY}, {H});
  const DeviceTensor tq = make_tensor(ops, DType::kF32, {1, H, d}, q), tkv = make_tensor(ops, DType::kF32, {1, d}, kv);
  const DeviceTensor tring = make_tensor(ops, DType::kF32, {W, d}, ring), tcomp = make_tensor(ops, DType::kF32, {4, d}, comp);
  const OnePageCache comp_cache = one_page_cache(ops, tcomp);
  const AttentionSeq seq{{0, 1, 5}, tring.view(), comp_cache.cache};
  DeviceTensor out = ops.alloc(DType::kF32, {1, H, d});
  ops.sparse_attention({tq.view(), tkv.view(), &wsink, {}, consecutive_positions(ops, 5, 1).view(), {&seq, 1}, W, 2, 1.0f,
                        out.view()});
  // Window: position 4 (ring row 0 = 2) and 5 (kv = 1); entries 10, 20, 30.
  EXPECT_FLOAT_EQ(to_floats(out.view())[0], (2 + 1 + 10 + 20 + 30) / 5.0f);
}

// The batch's slices must cover each token once (check_params, shared by every backend).
TEST_F(CpuOpsTest, AttentionRejectsSlicesThatDoNotCoverTheBatchOnce) {
  const int64_t H = 1, d = 4, W = 2, T = 3;
  const Weight wsink = make_weight(ops, {0.0f}, {H});
  const DeviceTensor tq = make_tensor(ops, DType::kF32, {T, H, d}, random_floats(T * H * d, 40));
  const DeviceTensor tkv = make_tensor(ops, DType::kF32, {T, d}, random_floats(T * d, 41));
  const DeviceTensor ring = ops.alloc(DType::kF32, {W, d});
  DeviceTensor out = ops.alloc(DType::kF32, {T, H, d});
  const auto expect_error = [&](std::vector<AttentionSeq> seqs, const std::string& says) {
    try {
      ops.sparse_attention({tq.view(), tkv.view(), &wsink, {}, consecutive_positions(ops, 0, T).view(), seqs, W, 0, 1.0f,
                            out.view()});
      FAIL() << "accepted: " << says;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  expect_error({{{0, 2, 0}, ring.view(), {}}, {{1, 2, 0}, ring.view(), {}}}, "token 1 belongs to two sequences");
  expect_error({{{0, 2, 0}, ring.view(), {}}}, "token 2 belongs to no sequence");
  expect_error({{{2, 2, 0}, ring.view(), {}}}, "sequence 0 covers tokens [2, 4) of a batch of 3");
}

// ---- paged caches ---------------------------------------------------------------------------

// Pool rows [num_pages * page_rows, width] of large random values, so reading a wrong row shows.
std::vector<float> pool_filler(int64_t num_pages, int64_t page_rows, int64_t width) {
  return random_floats(static_cast<size_t>(num_pages * page_rows * width), 99, 50.0f);
}

// Puts the entries `rows` ([entries, width]) into `pool` where `table` says: entry j in row
// j % page_rows of page table[j / page_rows]; entries of -1 pages are left out.
void scatter(std::vector<float>& pool, const std::vector<float>& rows, int64_t width, const std::vector<int32_t>& table,
             int64_t page_rows) {
  const auto entries = static_cast<int64_t>(rows.size()) / width;
  for (int64_t j = 0; j < entries; ++j) {
    const int32_t page = table.at(static_cast<size_t>(j / page_rows));
    if (page >= 0) std::copy_n(rows.begin() + j * width, width, pool.begin() + (page * page_rows + j % page_rows) * width);
  }
}

// A pool of num_pages pages holding `rows` where `table` puts them, filler elsewhere.
DeviceTensor scattered_pool(Ops& ops, const std::vector<float>& rows, int64_t width, const std::vector<int32_t>& table,
                            int64_t num_pages, int64_t page_rows) {
  std::vector<float> pool = pool_filler(num_pages, page_rows, width);
  scatter(pool, rows, width, table, page_rows);
  return make_tensor(ops, DType::kF32, {num_pages, page_rows, width}, pool);
}

// Entry j of each sequence goes to row j % page_rows of page table[j / page_rows] of the shared
// pool; an entry in a -1 page, past the table or in a page outside the pool is refused.
TEST_F(CpuOpsTest, WriteCacheRowsAddressesEntriesThroughTheBlockTables) {
  const int64_t width = 3, page_rows = 2;
  const std::vector<float> src = random_floats(5 * width, 5);
  const DeviceTensor from = make_tensor(ops, DType::kF32, {5, width}, src);
  DeviceTensor pool = ops.alloc(DType::kF32, {4, page_rows, width});
  const DeviceTensor table_a = make_ints(ops, {2}, {3, 1}), table_b = make_ints(ops, {2}, {0, -1});
  const PagedCache a{pool.view(), table_a.view()}, b{pool.view(), table_b.view()};
  const std::vector<CacheRows> seqs = {{0, 3, a}, {3, 2, b}};
  ops.write_cache_rows({from.view(), make_ints(ops, {5}, {1, 2, -1, 0, 1}).view(), seqs});
  // a: entry 1 -> page 3 row 1 (pool row 7), entry 2 -> page 1 row 0 (row 2); b: entries 0, 1 ->
  // page 0 (rows 0, 1).
  const std::vector<int64_t> source_of_pool_row = {3, 4, 1, -1, -1, -1, -1, 0};
  const std::vector<float> got = to_floats(pool.view());
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t c = 0; c < width; ++c) {
      const int64_t from_row = source_of_pool_row[static_cast<size_t>(r)];
      EXPECT_EQ(got[r * width + c], from_row < 0 ? 0.0f : src[from_row * width + c]) << "pool row " << r;
    }

  const auto expect_refused = [&](std::vector<int32_t> entries, const PagedCache& cache, const std::string& says) {
    const std::vector<CacheRows> one = {{0, 1, cache}};
    try {
      ops.write_cache_rows({from.view(), make_ints(ops, {5}, entries).view(), one});
      ADD_FAILURE() << "accepted: " << says;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  expect_refused({2, -1, -1, -1, -1}, b, "goes to entry 2 of sequence 0's cache, which has no row for it");
  expect_refused({4, -1, -1, -1, -1}, a, "goes to entry 4 of sequence 0's cache, which has no row for it");
  const DeviceTensor outside = make_ints(ops, {2}, {0, 4});
  expect_refused({3, -1, -1, -1, -1}, {pool.view(), outside.view()}, "a table of 2 pages of 2 rows into a pool of 4");
}

class PagedAttentionTest : public CpuOpsTest, public ::testing::WithParamInterface<bool> {};

// Two sequences whose compressed entries are scattered over one pool in shuffled, interleaved
// pages attend exactly as with contiguous caches: the same entries in the same order, the same
// bits, with and without top-k.
TEST_P(PagedAttentionTest, ShuffledPagesGiveTheContiguousCachesBits) {
  const bool with_topk = GetParam();
  const int64_t H = 2, d = 8, W = 3, ratio = 2, page_rows = 2, T = 5;
  // Sequence a: tokens 0-2 at positions 9-11 (entries 0-5 visible); b: tokens 3-4 at 4-5 (0-2).
  const std::vector<float> ea = random_floats(6 * d, 50), eb = random_floats(3 * d, 51);
  const DeviceTensor ca = make_tensor(ops, DType::kF32, {6, d}, ea), cb = make_tensor(ops, DType::kF32, {3, d}, eb);
  const std::vector<int32_t> ta = {4, 0, 5}, tb = {2, 1};
  std::vector<float> pool_values = pool_filler(6, page_rows, d);
  scatter(pool_values, ea, d, ta, page_rows);
  scatter(pool_values, eb, d, tb, page_rows);
  const DeviceTensor pool = make_tensor(ops, DType::kF32, {6, page_rows, d}, pool_values);
  const DeviceTensor table_a = make_ints(ops, {3}, ta), table_b = make_ints(ops, {2}, tb);

  const std::vector<float> q = random_floats(T * H * d, 52), kv = random_floats(T * d, 53);
  const DeviceTensor tq = make_tensor(ops, DType::kF32, {T, H, d}, q), tkv = make_tensor(ops, DType::kF32, {T, d}, kv);
  const DeviceTensor ring_a = make_tensor(ops, DType::kF32, {W, d}, random_floats(W * d, 54));
  const DeviceTensor ring_b = make_tensor(ops, DType::kF32, {W, d}, random_floats(W * d, 55));
  const Weight sink = make_weight(ops, {0.25f, -0.5f}, {H});
  const DeviceTensor positions = make_ints(ops, {T}, {9, 10, 11, 4, 5});
  const DeviceTensor topk = make_ints(ops, {T, 3}, {0, 3, 4, 2, -1, -1, 1, 3, 5, 1, -1, -1, 0, 1, 2});
  const auto attend = [&](const PagedCache& a, const PagedCache& b) {
    const std::vector<AttentionSeq> seqs = {{{0, 3, 9}, ring_a.view(), a}, {{3, 2, 4}, ring_b.view(), b}};
    DeviceTensor out = ops.alloc(DType::kF32, {T, H, d});
    ops.sparse_attention({tq.view(), tkv.view(), &sink, with_topk ? ConstTensorView(topk.view()) : ConstTensorView(),
                          positions.view(), seqs, W, ratio, 0.4f, out.view()});
    return to_floats(out.view());
  };
  const OnePageCache one_a = one_page_cache(ops, ca), one_b = one_page_cache(ops, cb);
  EXPECT_TRUE(same_bits(attend({pool.view(), table_a.view()}, {pool.view(), table_b.view()}),
                        attend(one_a.cache, one_b.cache)));
}

INSTANTIATE_TEST_SUITE_P(TopkOrAll, PagedAttentionTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "topk" : "all"; });

// Entries in a -1 page are absent: attending to all visible entries skips them, which is the
// top-k list of the present ones.
TEST_F(CpuOpsTest, SparseAttentionSkipsEntriesOfMissingPages) {
  const int64_t H = 2, d = 8, W = 2, ratio = 2, page_rows = 2, T = 3;
  const std::vector<float> entries = random_floats(6 * d, 60);
  const DeviceTensor contiguous = make_tensor(ops, DType::kF32, {6, d}, entries);
  const std::vector<int32_t> table = {2, -1, 0};  // entries 2 and 3 absent
  const DeviceTensor pool = scattered_pool(ops, entries, d, table, 3, page_rows);
  const DeviceTensor ttable = make_ints(ops, {3}, table);
  const DeviceTensor tq = make_tensor(ops, DType::kF32, {T, H, d}, random_floats(T * H * d, 61));
  const DeviceTensor tkv = make_tensor(ops, DType::kF32, {T, d}, random_floats(T * d, 62));
  const DeviceTensor ring = make_tensor(ops, DType::kF32, {W, d}, random_floats(W * d, 63));
  const Weight sink = make_weight(ops, {0.0f, 1.0f}, {H});
  const DeviceTensor positions = consecutive_positions(ops, 9, T);  // entries 0-4, 0-4, 0-5 visible
  const DeviceTensor present = make_ints(ops, {T, 4}, {0, 1, 4, -1, 0, 1, 4, -1, 0, 1, 4, 5});
  const auto attend = [&](const PagedCache& cache, ConstTensorView topk) {
    const std::vector<AttentionSeq> seqs = {{{0, T, 9}, ring.view(), cache}};
    DeviceTensor out = ops.alloc(DType::kF32, {T, H, d});
    ops.sparse_attention({tq.view(), tkv.view(), &sink, topk, positions.view(), seqs, W, ratio, 0.4f, out.view()});
    return to_floats(out.view());
  };
  const OnePageCache one = one_page_cache(ops, contiguous);
  EXPECT_TRUE(same_bits(attend({pool.view(), ttable.view()}, {}), attend(one.cache, present.view())));
}

// The indexer reads its keys through the block tables: shuffled pages give the contiguous keys'
// top-k; a key in a -1 page scores -inf and is never chosen over a present one.
TEST_F(CpuOpsTest, IndexerReadsKeysThroughTheBlockTables) {
  const int64_t heads = 3, dh = 8, page_rows = 2, k = 3, T = 4;
  const std::vector<float> keys = random_floats(8 * dh, 70);
  const DeviceTensor contiguous = make_tensor(ops, DType::kF32, {8, dh}, keys);
  const std::vector<int32_t> table = {3, 0, 2, 1};
  const DeviceTensor pool = scattered_pool(ops, keys, dh, table, 4, page_rows);
  const DeviceTensor ttable = make_ints(ops, {4}, table);
  const DeviceTensor q = make_tensor(ops, DType::kF32, {T, heads, dh}, random_floats(T * heads * dh, 71));
  const DeviceTensor w = make_tensor(ops, DType::kF32, {T, heads}, random_floats(T * heads, 72));
  const DeviceTensor positions = consecutive_positions(ops, 28, T);  // 7, 7, 7, 8 keys visible
  const auto top = [&](const PagedCache& cache) {
    const IndexerSeq seq{{0, T, 28}, cache};
    DeviceTensor topk = ops.alloc(DType::kI32, {T, k});
    ops.indexer_topk({q.view(), w.view(), 0.5f, 4, positions.view(), {&seq, 1}, topk.view()});
    return to_ints(topk.view());
  };
  const OnePageCache one = one_page_cache(ops, contiguous);
  EXPECT_EQ(top({pool.view(), ttable.view()}), top(one.cache));

  // One head, unit keys: key j scores its scale; the largest two (entries 2 and 3) are absent.
  const std::vector<float> scale = {1, 5, 9, 8, 3, 4, 2, 6};
  std::vector<float> unit(8 * 4, 0.0f);
  for (int64_t j = 0; j < 8; ++j) unit[j * 4 + j % 4] = scale[j];
  const std::vector<int32_t> missing = {0, -1, 1, 2};
  const DeviceTensor unit_pool = scattered_pool(ops, unit, 4, missing, 3, page_rows);
  const DeviceTensor missing_table = make_ints(ops, {4}, missing);
  const DeviceTensor q1 = make_tensor(ops, DType::kF32, {1, 1, 4}, {1, 1, 1, 1});
  const DeviceTensor w1 = make_tensor(ops, DType::kF32, {1, 1}, {1});
  const IndexerSeq seq{{0, 1, 31}, {unit_pool.view(), missing_table.view()}};
  DeviceTensor topk = ops.alloc(DType::kI32, {1, k});
  ops.indexer_topk({q1.view(), w1.view(), 1.0f, 4, consecutive_positions(ops, 31, 1).view(), {&seq, 1}, topk.view()});
  EXPECT_EQ(to_ints(topk.view()), (std::vector<int32_t>{1, 5, 7}));
}

// A table too short for the entries a slice's tokens see is refused before anything is read.
TEST_F(CpuOpsTest, PagedReadersRefuseATableShorterThanTheirEntries) {
  const int64_t H = 1, d = 4, W = 2;
  const DeviceTensor pool = ops.alloc(DType::kF32, {2, 2, d});
  const DeviceTensor table = make_ints(ops, {1}, {0});
  const DeviceTensor tq = make_tensor(ops, DType::kF32, {1, H, d}, random_floats(H * d, 80));
  const DeviceTensor tkv = make_tensor(ops, DType::kF32, {1, d}, random_floats(d, 81));
  const DeviceTensor ring = ops.alloc(DType::kF32, {W, d});
  const Weight sink = make_weight(ops, {0.0f}, {H});
  const AttentionSeq seq{{0, 1, 5}, ring.view(), {pool.view(), table.view()}};  // 3 entries at ratio 2
  DeviceTensor out = ops.alloc(DType::kF32, {1, H, d});
  try {
    ops.sparse_attention({tq.view(), tkv.view(), &sink, {}, consecutive_positions(ops, 5, 1).view(), {&seq, 1}, W, 2,
                          1.0f, out.view()});
    FAIL() << "a table of 2 entries was read for 3";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("sparse_attention: sequence 0's compressed table of 1 pages of 2 rows cannot "
                                         "hold the 3 entries its tokens see"),
              std::string::npos)
        << e.what();
  }
}

// ---- MoE ------------------------------------------------------------------------------------

TEST_F(CpuOpsTest, SwigluClampsGateAboveAndUpBothWays) {
  const DeviceTensor gate = make_tensor(ops, DType::kF32, {1, 4}, {20.0f, -3.0f, 1.0f, 10.0f});
  const DeviceTensor up = make_tensor(ops, DType::kF32, {1, 4}, {-15.0f, 2.0f, 12.0f, 0.5f});
  DeviceTensor out = ops.alloc(DType::kF32, {1, 4});
  ops.swiglu({gate.view(), up.view(), {}, 10.0f, out.view()});
  const std::vector<float> got = to_floats(out.view());
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  EXPECT_NEAR(got[0], silu(10) * -10, 1e-5);   // gate 20 -> 10, up -15 -> -10
  EXPECT_NEAR(got[1], silu(-3) * 2, 1e-6);     // no clamp from below on the gate
  EXPECT_NEAR(got[2], silu(1) * 10, 1e-5);     // up 12 -> 10
  EXPECT_NEAR(got[3], silu(10) * 0.5, 1e-5);
  ops.swiglu({gate.view(), up.view(), {}, 0.0f, out.view()});  // limit 0: no clamp
  EXPECT_NEAR(to_floats(out.view())[0], silu(20) * -15, 1e-4);
}

TEST_F(CpuOpsTest, RoutingBiasChoosesExpertsButWeightsUseUnbiasedScores) {
  const int64_t E = 4, k = 2;
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  const DeviceTensor tl = make_tensor(ops, DType::kF32, {1, E}, logits);
  std::vector<double> s;
  for (float v : logits) s.push_back(std::sqrt(std::log1p(std::exp(double(v)))));
  const DeviceTensor ids = make_ints(ops, {1}, {0});
  for (const auto& [bias, chosen] : std::vector<std::pair<std::vector<float>, std::vector<int32_t>>>{
           {{0, 0, 0, 0}, {0, 1}}, {{0, 0, 0, 5}, {0, 3}}, {{-9, 0, 0.9f, 0}, {1, 2}}}) {
    const Weight wb = make_weight(ops, bias, {E});
    DeviceTensor experts = ops.alloc(DType::kI32, {1, k}), weights = ops.alloc(DType::kF32, {1, k});
    ops.moe_route({tl.view(), &wb, nullptr, ids.view(), ScoringFunc::kSqrtSoftplus, 1.5f, experts.view(), weights.view()});
    EXPECT_EQ(to_ints(experts.view()), chosen);
    const std::vector<float> w = to_floats(weights.view());
    const double sum = s[chosen[0]] + s[chosen[1]];
    EXPECT_NEAR(w[0], s[chosen[0]] / sum * 1.5, 1e-6);
    EXPECT_NEAR(w[1], s[chosen[1]] / sum * 1.5, 1e-6);
  }
}

TEST_F(CpuOpsTest, HashRoutingFollowsTheTokenIdTable) {
  const int64_t E = 4, k = 2, V = 3;
  const std::vector<int32_t> table = {3, 1, 0, 2, 2, 3};
  const Weight tid2eid = ops.load_weight(
      {"tid2eid", WeightFormat::kPlain, host_view(table.data(), DType::kI32, {V, k}), {}});
  const std::vector<float> logits = {5.0f, -5.0f, 0.0f, 1.0f, 5.0f, -5.0f, 0.0f, 1.0f};
  const DeviceTensor tl = make_tensor(ops, DType::kF32, {2, E}, logits);
  const DeviceTensor ids = make_ints(ops, {2}, {0, 2});
  DeviceTensor experts = ops.alloc(DType::kI32, {2, k}), weights = ops.alloc(DType::kF32, {2, k});
  ops.moe_route({tl.view(), nullptr, &tid2eid, ids.view(), ScoringFunc::kSqrtSoftplus, 1.0f, experts.view(), weights.view()});
  EXPECT_EQ(to_ints(experts.view()), (std::vector<int32_t>{1, 3, 2, 3}));  // rows of tokens 0 and 2, sorted
  const std::vector<float> w = to_floats(weights.view());
  auto s = [&](int e) { return std::sqrt(std::log1p(std::exp(double(logits[e])))); };
  EXPECT_NEAR(w[0], s(1) / (s(1) + s(3)), 1e-6);
  EXPECT_NEAR(w[3], s(3) / (s(2) + s(3)), 1e-6);
}

TEST_F(CpuOpsTest, ExpertsSumWeightedSwigluOutputsPlusShared) {
  const int64_t T = 3, D = 16, I = 8, E = 3, k = 2;
  // Experts 0 .. E-1 routed, expert E the shared one.
  std::vector<std::vector<float>> w1, w2, w3;
  std::vector<Weight> weights;
  for (int64_t e = 0; e <= E; ++e) {
    w1.push_back(random_floats(I * D, 40 + e, 0.3f));
    w3.push_back(random_floats(I * D, 50 + e, 0.3f));
    w2.push_back(random_floats(D * I, 60 + e, 0.3f));
  }
  for (int64_t e = 0; e <= E; ++e) {
    weights.push_back(make_weight(ops, w1[e], {I, D}));
    weights.push_back(make_weight(ops, w2[e], {D, I}));
    weights.push_back(make_weight(ops, w3[e], {I, D}));
  }
  std::vector<ExpertWeights> routed;
  for (int64_t e = 0; e < E; ++e) routed.push_back({&weights[3 * e], &weights[3 * e + 1], &weights[3 * e + 2]});
  const ExpertWeights shared{&weights[3 * E], &weights[3 * E + 1], &weights[3 * E + 2]};
  const std::vector<float> x = random_floats(T * D, 70);
  const std::vector<int32_t> ex = {0, 2, 1, 2, 0, 1};
  const std::vector<float> wt = {0.6f, 1.4f, 1.0f, 0.5f, 2.0f, 0.25f};
  const DeviceTensor tx = make_tensor(ops, DType::kF32, {T, D}, x);
  const DeviceTensor te = make_ints(ops, {T, k}, ex), tw = make_tensor(ops, DType::kF32, {T, k}, wt);
  DeviceTensor out = ops.alloc(DType::kF32, {T, D});
  ops.moe_experts({tx.view(), te.view(), tw.view(), routed, &shared, 10.0f, ActQuant::kNone, ActQuant::kNone, out.view()});
  std::vector<double> ref(T * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s <= k; ++s) {  // slot k: the shared expert, weight 1
      const int32_t e = s < k ? ex[t * k + s] : static_cast<int32_t>(E);
      const double weight = s < k ? wt[t * k + s] : 1.0;
      std::vector<double> h(I);
      for (int64_t i = 0; i < I; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < D; ++c) {
          g += double(w1[e][i * D + c]) * x[t * D + c];
          u += double(w3[e][i * D + c]) * x[t * D + c];
        }
        g = std::min(g, 10.0);
        u = std::clamp(u, -10.0, 10.0);
        h[i] = g / (1 + std::exp(-g)) * u * weight;
      }
      for (int64_t c = 0; c < D; ++c)
        for (int64_t i = 0; i < I; ++i) ref[t * D + c] += double(w2[e][c * I + i]) * h[i];
    }
  EXPECT_LT(max_rel_error(to_floats(out.view()), ref), 1e-5);

  // A token's output does not depend on the other tokens in the batch.
  const DeviceTensor x1 = make_tensor(ops, DType::kF32, {1, D}, {x.begin() + 2 * D, x.end()});
  const DeviceTensor e1 = make_ints(ops, {1, k}, {0, 1}), w1t = make_tensor(ops, DType::kF32, {1, k}, {2.0f, 0.25f});
  DeviceTensor o1 = ops.alloc(DType::kF32, {1, D});
  ops.moe_experts({x1.view(), e1.view(), w1t.view(), routed, &shared, 10.0f, ActQuant::kNone, ActQuant::kNone, o1.view()});
  const std::vector<float> all = to_floats(out.view());
  EXPECT_TRUE(same_bits(to_floats(o1.view()), {all.begin() + 2 * D, all.end()}));

  // Without a shared expert, the routed sum alone.
  DeviceTensor routed_only = ops.alloc(DType::kF32, {1, D});
  ops.moe_experts({x1.view(), e1.view(), w1t.view(), routed, nullptr, 10.0f, ActQuant::kNone, ActQuant::kNone,
                   routed_only.view()});
  const DeviceTensor shared_only = ops.moe_shared_expert(
      {x1.view(), e1.view(), w1t.view(), routed, &shared, 10.0f, ActQuant::kNone, ActQuant::kNone, o1.view()});
  const std::vector<float> r = to_floats(routed_only.view()), sh = to_floats(shared_only.view()), both = to_floats(o1.view());
  for (int64_t c = 0; c < D; ++c) EXPECT_EQ(both[c], r[c] + sh[c]) << c;
}

// Expert parallelism's halves: the (token, slot) rows split between two ranks by expert (each
// rank's `routed` its half, ids rebased), in an order of the rank's own, through moe_expert_rows,
// brought back and summed by moe_combine give moe_experts' bits, with bf16 activations and FP8
// activation quantisation as the default numerics have them.
TEST_F(CpuOpsTest, ExpertRowsSplitOverRanksAndCombinedGiveMoeExpertsBits) {
  const int64_t T = 5, D = 256, I = 128, E = 6, k = 3, half = E / 2;
  std::vector<Weight> weights;
  for (int64_t e = 0; e <= E; ++e) {
    weights.push_back(make_weight(ops, random_floats(I * D, 140 + e, 0.1f), {I, D}));
    weights.push_back(make_weight(ops, random_floats(D * I, 160 + e, 0.1f), {D, I}));
    weights.push_back(make_weight(ops, random_floats(I * D, 180 + e, 0.1f), {I, D}));
  }
  std::vector<ExpertWeights> routed;
  for (int64_t e = 0; e < E; ++e) routed.push_back({&weights[3 * e], &weights[3 * e + 1], &weights[3 * e + 2]});
  const ExpertWeights shared{&weights[3 * E], &weights[3 * E + 1], &weights[3 * E + 2]};
  const std::vector<float> x = random_floats(T * D, 200);
  const std::vector<int32_t> ex = {0, 2, 5, 1, 3, 4, 0, 1, 2, 3, 4, 5, 2, 4, 5};
  const std::vector<float> wt = random_floats(T * k, 210, 1.0f);
  const DeviceTensor tx = make_tensor(ops, DType::kBF16, {T, D}, x);
  const DeviceTensor te = make_ints(ops, {T, k}, ex), tw = make_tensor(ops, DType::kF32, {T, k}, wt);
  const MoeExpertsParams whole{tx.view(), te.view(), tw.view(), routed, &shared, 10.0f, ActQuant::kFp8Block128,
                               ActQuant::kFp8Block128, {}};
  DeviceTensor want = ops.alloc(DType::kBF16, {T, D});
  MoeExpertsParams whole_out = whole;
  whole_out.out = want.view();
  ops.moe_experts(whole_out);

  // Each rank's rows, last (token, slot) first; the rows come back to their (token, slot).
  const std::vector<float> xs = to_floats(tx.view());
  std::vector<float> back(static_cast<size_t>(T * k * D));
  for (int64_t rank = 0; rank < 2; ++rank) {
    std::vector<int64_t> pairs;
    for (int64_t r = T * k - 1; r >= 0; --r)
      if (ex[static_cast<size_t>(r)] / half == rank) pairs.push_back(r);
    std::vector<float> rows_x;
    std::vector<int32_t> local;
    std::vector<float> rows_w;
    for (const int64_t r : pairs) {
      rows_x.insert(rows_x.end(), xs.begin() + (r / k) * D, xs.begin() + (r / k + 1) * D);
      local.push_back(static_cast<int32_t>(ex[static_cast<size_t>(r)] - rank * half));
      rows_w.push_back(wt[static_cast<size_t>(r)]);
    }
    const auto R = static_cast<int64_t>(pairs.size());
    const DeviceTensor rx = make_tensor(ops, DType::kBF16, {R, D}, rows_x);
    const DeviceTensor re = make_ints(ops, {R}, local), rw = make_tensor(ops, DType::kF32, {R}, rows_w);
    DeviceTensor ry = ops.alloc(DType::kBF16, {R, D});
    ops.moe_expert_rows({rx.view(), re.view(), rw.view(), std::span(routed).subspan(static_cast<size_t>(rank * half), half),
                         10.0f, ActQuant::kFp8Block128, ry.view()});
    const std::vector<float> y = to_floats(ry.view());
    for (int64_t i = 0; i < R; ++i) std::copy_n(y.begin() + i * D, D, back.begin() + pairs[static_cast<size_t>(i)] * D);
  }
  const DeviceTensor rows = make_tensor(ops, DType::kBF16, {T * k, D}, back);
  const DeviceTensor shared_out = ops.moe_shared_expert(whole);
  DeviceTensor got = ops.alloc(DType::kBF16, {T, D});
  ops.moe_combine({rows.view(), k, shared_out.view(), got.view()});
  EXPECT_TRUE(same_bits(to_floats(got.view()), to_floats(want.view())));

  // Bad shapes are refused; so are the halves by a backend without them, by its name.
  DeviceTensor wrong = ops.alloc(DType::kBF16, {T + 1, D});
  EXPECT_THROW(ops.moe_combine({rows.view(), k, shared_out.view(), wrong.view()}), UsageError);
  EXPECT_THROW(ops.moe_combine({rows.view(), 0, {}, got.view()}), UsageError);
  class WithoutHalves final : public dsv4::testing::CpuForwardingOps {
   public:
    std::string_view name() const override { return "halfless"; }
    void moe_combine(const MoeCombineParams& p) override { Ops::moe_combine(p); }
  } halfless;
  try {
    halfless.moe_combine({rows.view(), k, shared_out.view(), got.view()});
    ADD_FAILURE() << "moe_combine ran on a backend without it";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("the halfless backend does not run expert-parallel MoE yet"), std::string::npos)
        << e.what();
  }
}

// With a gate the op routes first: its experts, weights and output are those of linear(),
// moe_route() and the op without a gate, bit for bit; a gate of another shape is refused by name.
TEST_F(CpuOpsTest, ExpertsWithAGateRouteFirst) {
  const int64_t T = 4, D = 16, I = 8, E = 4, k = 2;
  std::vector<Weight> weights;
  for (int64_t e = 0; e <= E; ++e)
    for (const auto& [rows, cols] : {std::pair{I, D}, std::pair{D, I}, std::pair{I, D}})
      weights.push_back(make_weight(ops, random_floats(rows * cols, 80 + weights.size(), 0.3f), {rows, cols}));
  std::vector<ExpertWeights> routed;
  for (int64_t e = 0; e < E; ++e) routed.push_back({&weights[3 * e], &weights[3 * e + 1], &weights[3 * e + 2]});
  const ExpertWeights shared{&weights[3 * E], &weights[3 * E + 1], &weights[3 * E + 2]};
  const Weight gate_weight = make_weight(ops, random_floats(E * D, 90, 0.5f), {E, D});
  const Weight bias = make_weight(ops, {0.1f, -0.2f, 0.0f, 0.3f}, {E});
  const DeviceTensor x = make_tensor(ops, DType::kF32, {T, D}, random_floats(T * D, 91));
  const DeviceTensor ids = make_ints(ops, {T}, {0, 1, 2, 3});

  DeviceTensor logits = ops.alloc(DType::kF32, {T, E});
  ops.linear({x.view(), &gate_weight, ActQuant::kNone, logits.view()});
  DeviceTensor experts = ops.alloc(DType::kI32, {T, k}), expert_weights = ops.alloc(DType::kF32, {T, k});
  ops.moe_route({logits.view(), &bias, nullptr, ids.view(), ScoringFunc::kSqrtSoftplus, 1.5f, experts.view(),
                 expert_weights.view()});
  DeviceTensor out = ops.alloc(DType::kF32, {T, D});
  ops.moe_experts({x.view(), experts.view(), expert_weights.view(), routed, &shared, 10.0f, ActQuant::kNone,
                   ActQuant::kNone, out.view()});

  const MoeGate gate{.weight = &gate_weight, .bias = &bias, .tid2eid = nullptr, .token_ids = ids.view(), .route_scale = 1.5f};
  DeviceTensor gated_experts = ops.alloc(DType::kI32, {T, k}), gated_weights = ops.alloc(DType::kF32, {T, k});
  DeviceTensor gated = ops.alloc(DType::kF32, {T, D});
  ops.moe_experts({x.view(), gated_experts.view(), gated_weights.view(), routed, &shared, 10.0f, ActQuant::kNone,
                   ActQuant::kNone, gated.view(), &gate});
  EXPECT_EQ(to_ints(gated_experts.view()), to_ints(experts.view()));
  EXPECT_TRUE(same_bits(to_floats(gated_weights.view()), to_floats(expert_weights.view())));
  EXPECT_TRUE(same_bits(to_floats(gated.view()), to_floats(out.view())));

  const Weight narrow = make_weight(ops, random_floats((E - 1) * D, 92), {E - 1, D});
  const MoeGate bad{.weight = &narrow, .bias = &bias, .tid2eid = nullptr, .token_ids = ids.view()};
  try {
    ops.moe_experts({x.view(), gated_experts.view(), gated_weights.view(), routed, &shared, 10.0f, ActQuant::kNone,
                     ActQuant::kNone, gated.view(), &bad});
    FAIL() << "a gate of 3 rows for 4 experts was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("gate weight"), std::string::npos) << e.what();
  }
}

TEST_F(CpuOpsTest, EmbedRepeatsTheRowIntoEveryStream) {
  const Weight table = make_weight(ops, {1, 2, 3, 4, 5, 6}, {3, 2});
  const DeviceTensor ids = make_ints(ops, {2}, {2, 0});
  DeviceTensor out = ops.alloc(DType::kBF16, {2, 3, 2});
  ops.embed({ids.view(), &table, out.view()});
  EXPECT_EQ(to_floats(out.view()), (std::vector<float>{5, 6, 5, 6, 5, 6, 1, 2, 1, 2, 1, 2}));
  const DeviceTensor bad = make_ints(ops, {1}, {3});
  DeviceTensor one = ops.alloc(DType::kBF16, {1, 1, 2});
  EXPECT_THROW(ops.embed({bad.view(), &table, one.view()}), UsageError);
}

}  // namespace
}  // namespace dsv4::cpu
