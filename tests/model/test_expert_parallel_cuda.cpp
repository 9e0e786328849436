// Expert parallelism on one GPU (the "communication path on one GPU, two ranks"): two
// CudaOps ranks, each a thread holding half of the tiny model's routed experts, exchanging rows
// through the in-process expert group (CudaOps::moe_expert_rows / moe_combine, the group's copies
// between the ranks' device memory), get the logits one CudaOps holding every expert gets, bit for
// bit, in the default numerics and in exact math; and a rank without tokens serves the other.
// The same across two GPUs through NCCL. Skips where the GPUs are missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device.h"
#include "backend/cuda/nccl_expert_comm.h"
#include "core/error.h"
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

// NCCL takes one rank per GPU: a group of two ranks on one GPU is refused before NCCL is loaded.
TEST(ExpertParallelCuda, AnNcclGroupOfTwoRanksOnOneGpuIsRefused) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device";
  cuda::CudaOps a, b;
  const std::vector<cuda::CudaOps*> ranks = {&a, &b};
  EXPECT_THROW(cuda::nccl_expert_group(ranks), UsageError);
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

// Across two GPUs through NCCL (backend/cuda/nccl_expert_comm.h): each rank a CudaOps on its own
// GPU with half of the experts, on its own thread; one GPU's logits bit for bit, default and exact
// numerics, and the op-level exchange with rows of every count (none included). Skips with fewer
// than two GPUs.
TEST(ExpertParallelNccl, TwoGpusGetOneGpusLogits) {
  if (cuda::device_count() < 2) GTEST_SKIP() << "fewer than two CUDA devices";
  cuda::CudaOps whole_ops;
  const Model whole = Model::load(whole_ops, tiny_model_dir());
  const int64_t V = whole.config()->vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {test_ids(40, V, 3), test_ids(70, V, 4)};
  std::vector<std::unique_ptr<cuda::CudaOps>> ops;
  for (int r = 0; r < 2; ++r) {
    cuda::CudaOptions options;
    options.device = r;
    ops.push_back(std::make_unique<cuda::CudaOps>(options));
  }
  std::vector<Model> shares;
  for (int r = 0; r < 2; ++r) {
    ops[static_cast<size_t>(r)]->bind_thread();
    shares.push_back(Model::load(*ops[static_cast<size_t>(r)], tiny_model_dir(), {}, {r, 2}));
  }
  const std::vector<cuda::CudaOps*> ranks = {ops[0].get(), ops[1].get()};
  const std::vector<std::unique_ptr<ExpertComm>> group = cuda::nccl_expert_group(ranks);
  for (const bool exact : {false, true}) {
    whole_ops.bind_thread();
    std::vector<std::vector<float>> want;
    for (const auto& ids : prompts) want.push_back(sequence_logits(whole, whole_ops, ids, 3, exact, nullptr));
    std::vector<std::vector<float>> got(2);
    std::vector<std::thread> threads;
    for (size_t r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        ops[r]->bind_thread();
        got[r] = sequence_logits(shares[r], *ops[r], prompts[r], 3, exact, group[r].get());
      });
    for (std::thread& t : threads) t.join();
    for (size_t r = 0; r < 2; ++r)
      EXPECT_TRUE(same_bits(got[r], want[r])) << "rank " << r << (exact ? ", exact math" : ", default numerics");
  }

  // Rank r sends r + 2 d rows of value 100 r + d to rank d (rank 0 sends none to itself).
  std::vector<std::vector<float>> received(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      cuda::CudaOps& mine = *ops[static_cast<size_t>(r)];
      mine.bind_thread();
      std::vector<DeviceTensor> messages;
      std::vector<ConstTensorView> send;
      for (int d = 0; d < 2; ++d) {
        const int64_t rows = r + 2 * d;
        Tensor host(DType::kF32, {rows, 3});
        std::fill(host.data<float>(), host.data<float>() + host.numel(), static_cast<float>(100 * r + d));
        messages.push_back(mine.alloc(DType::kF32, {rows, 3}));
        mine.upload(host.view(), messages.back().view());
      }
      for (const DeviceTensor& m : messages) send.push_back(m.view());
      for (const DeviceTensor& t : group[static_cast<size_t>(r)]->all_to_all(mine, send)) {
        Tensor host(t.dtype(), t.shape());
        mine.download(t.view(), host.view());
        const std::vector<float> v = to_floats(host.view());
        received[static_cast<size_t>(r)].insert(received[static_cast<size_t>(r)].end(), v.begin(), v.end());
      }
    });
  for (std::thread& t : threads) t.join();
  // Rank 0 gets nothing from itself and 1 row of 100 from rank 1; rank 1 gets 2 rows of 1 and 3 of 101.
  EXPECT_EQ(received[0], std::vector<float>(3, 100.0f));
  std::vector<float> want1(6, 1.0f);
  want1.insert(want1.end(), 9, 101.0f);
  EXPECT_EQ(received[1], want1);
}

}  // namespace
}  // namespace dsv4::testing
