// Expert parallelism on one GPU (the "communication path on one GPU, two ranks"): two
// CudaOps ranks, each a thread holding half of the tiny model's routed experts, exchanging rows
// through the in-process expert group (CudaOps::moe_expert_rows / moe_combine, the group's copies
// between the ranks' device memory), get the logits one CudaOps holding every expert gets, bit for
// bit, in the default numerics and in exact math; and a rank without tokens serves the other.
// Skips where no GPU exists.
#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device.h"
#include "model/model.h"
#include "model_test_util.h"
#include "ops/expert_comm.h"

namespace dsv4::testing {
namespace {

TEST(ExpertParallelCuda, TwoRanksOnOneGpuGetOneRanksLogits) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  cuda::CudaOps whole_ops;
  const Model whole = Model::load(whole_ops, tiny_model_dir());
  const int64_t V = whole.config()->vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {test_ids(40, V, 3), test_ids(70, V, 4)};
  for (const bool exact : {false, true}) {
    std::vector<std::vector<float>> want;
    for (const auto& ids : prompts) want.push_back(sequence_logits(whole, whole_ops, ids, 3, exact, nullptr));
    const std::vector<std::unique_ptr<ExpertComm>> group = in_process_expert_group(2);
    std::vector<std::vector<float>> got(2);
    std::vector<std::thread> ranks;
    for (size_t r = 0; r < 2; ++r)
      ranks.emplace_back([&, r] {
        cuda::CudaOps ops;
        const Model mine = Model::load(ops, tiny_model_dir(), {}, {static_cast<int>(r), 2});
        got[r] = sequence_logits(mine, ops, prompts[r], 3, exact, group[r].get());
      });
    for (std::thread& t : ranks) t.join();
    for (size_t r = 0; r < 2; ++r)
      EXPECT_TRUE(same_bits(got[r], want[r])) << "rank " << r << (exact ? ", exact math" : ", default numerics");
  }
}

TEST(ExpertParallelCuda, ARankWithoutTokensServesTheOtherOnOneGpu) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  cuda::CudaOps whole_ops;
  const Model whole = Model::load(whole_ops, tiny_model_dir());
  const std::vector<int32_t> prompt = test_ids(33, whole.config()->vocab_size, 5);
  const int64_t decode = 2;
  const std::vector<float> want = sequence_logits(whole, whole_ops, prompt, decode, false, nullptr);
  const std::vector<std::unique_ptr<ExpertComm>> group = in_process_expert_group(2);
  std::vector<float> got;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      cuda::CudaOps ops;
      const Model mine = Model::load(ops, tiny_model_dir(), {}, {r, 2});
      if (r == 0) got = sequence_logits(mine, ops, prompt, decode, false, group[0].get());
      else
        for (int64_t s = 0; s <= decode; ++s) mine.forward_without_tokens(ops, *group[1], false);
    });
  for (std::thread& t : ranks) t.join();
  EXPECT_TRUE(same_bits(got, want));
}

}  // namespace
}  // namespace dsv4::testing
