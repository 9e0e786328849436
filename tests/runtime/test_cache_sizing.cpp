// Sizing the engine's caches from device memory (--gpu-memory-utilization): the arithmetic of
// runtime/cache_sizing.h on made-up totals (the normal case, a share too small for the weights, a
// share too small for one sequence of max_model_len), and the engine's choice among
// num_cache_blocks, cache_memory_bytes, gpu_memory_utilization and the longest requests, on the
// tiny checkpoint and a fake device: the CPU backend behind an Ops that reports a device of a
// chosen size and counts the bytes of every tensor made through it, so the profiled step's peak is
// real and serving can be checked against the share.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "cpu_forwarding_ops.h"
#include "model/cache.h"
#include "model/cache_pool.h"
#include "model/model.h"
#include "ops/expert_comm.h"
#include "runtime/cache_sizing.h"
#include "runtime/engine.h"

namespace dsv4 {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// `call` throws a UsageError whose message holds every one of `words`.
template <typename F>
void expect_usage_error(F&& call, const std::vector<std::string>& words) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one naming " << words.front();
  } catch (const UsageError& e) {
    for (const std::string& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << w << " in: " << e.what();
  }
}

// 4096 tokens in blocks of 64 of 1 MiB beside 1 GiB of fixed state: 1 GiB + 64 MiB at least.
CacheFootprint footprint() { return {kGiB, kMiB, 64, 4096, 8}; }

TEST(CacheMemoryFromUtilization, IsTheShareLessTheMemoryInUseTheActivationsAndTheSnapshots) {
  const GpuMemoryBudget b{0.9, 100 * kGiB, 60 * kGiB, 2 * kGiB, kGiB};
  EXPECT_EQ(cache_memory_from_utilization(b, footprint()), static_cast<int64_t>(std::floor(0.9 * 100 * kGiB)) - 63 * kGiB);
  // Exactly one sequence of max_model_len beside the fixed state is enough.
  const GpuMemoryBudget exact{1.0, 10 * kGiB, 10 * kGiB - (kGiB + 64 * kMiB), 0, 0};
  EXPECT_EQ(cache_memory_from_utilization(exact, footprint()), kGiB + 64 * kMiB);
}

TEST(CacheMemoryFromUtilization, AShareBelowTheMemoryInUseNamesTheFlagTheBytesInUseAndTheTotal) {
  const GpuMemoryBudget b{0.5, 100 * kGiB, 60 * kGiB, 2 * kGiB, 0};
  expect_usage_error([&] { cache_memory_from_utilization(b, footprint()); },
                     {"--gpu-memory-utilization 0.50", "(64424509440 bytes) are in use once the weights are loaded",
                      "of the GPU's 100.00 GiB (107374182400 bytes)", "raise --gpu-memory-utilization"});
  // The activations alone can tip it too.
  const GpuMemoryBudget tipped{0.5, 100 * kGiB, 49 * kGiB, 2 * kGiB, 0};
  expect_usage_error([&] { cache_memory_from_utilization(tipped, footprint()); },
                     {"--gpu-memory-utilization 0.50", "nothing is left for the KV cache"});
}

TEST(CacheMemoryFromUtilization, LessThanOneSequenceOfMaxModelLenSuggestsALowerMaxModelLen) {
  // 1 GiB + 40 MiB left: 40 blocks beside the fixed state, 2,560 tokens of the 4,096 needed.
  const GpuMemoryBudget b{1.0, 100 * kGiB, 100 * kGiB - (kGiB + 40 * kMiB), 0, 0};
  expect_usage_error([&] { cache_memory_from_utilization(b, footprint()); },
                     {"--gpu-memory-utilization 1.00 leaves 1.04 GiB (1115684864 bytes) for the KV cache",
                      "less than one sequence of max_model_len 4096 needs beside the fixed state of 8 sequences "
                      "(1.06 GiB (1140850688 bytes))",
                      "it holds sequences of up to 2560 tokens", "lower --max-model-len",
                      "raise --gpu-memory-utilization"});
}

TEST(CacheMemoryFromUtilization, RefusesAShareOutsideZeroToOne) {
  for (double u : {0.0, -0.1, 1.5, std::numeric_limits<double>::quiet_NaN()})
    expect_usage_error([&] { cache_memory_from_utilization({u, 100 * kGiB, 0, 0, 0}, footprint()); },
                       {"--gpu-memory-utilization", "must be in (0, 1]"});
}

// The CPU backend as a device of total_bytes: every tensor made through it (weights included)
// counts as the backend's until its last copy goes, `other_bytes` stand for the rest of the device's
// users, and device_memory() reports them with the peak since its previous call.
class FakeDeviceOps final : public testing::CpuForwardingOps {
 public:
  int64_t total_bytes = 0;
  int64_t other_bytes = 0;
  int64_t device_memory_calls = 0;
  int64_t live() const { return counts_->live; }
  // The most the backend held since the previous device_memory() call.
  int64_t peak() const { return counts_->peak; }

  std::string_view name() const override { return "fake-device"; }
  std::optional<DeviceMemory> device_memory() override {
    ++device_memory_calls;
    const DeviceMemory m{total_bytes, total_bytes - other_bytes - counts_->live, counts_->live, counts_->peak};
    counts_->peak = counts_->live;
    return m;
  }
  DeviceTensor alloc(DType dtype, Shape shape) override { return counted(cpu_.alloc(dtype, std::move(shape))); }
  Weight load_weight(const LoadWeightParams& p) override { return counted(cpu_.load_weight(p)); }
  Weight dummy_weight(const DummyWeightParams& p) override { return counted(cpu_.dummy_weight(p)); }

 private:
  struct Counts {
    int64_t live = 0;
    int64_t peak = 0;
  };
  // The same storage, counted while any copy of the tensor lives (the counts outlive this object).
  DeviceTensor counted(const DeviceTensor& t) {
    if (t.empty()) return t;
    const int64_t bytes = t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
    counts_->live += bytes;
    counts_->peak = std::max(counts_->peak, counts_->live);
    std::shared_ptr<std::byte> storage(t.view().bytes(), [counts = counts_, bytes, keep = t](std::byte*) {
      counts->live -= bytes;
    });
    return DeviceTensor(std::move(storage), t.dtype(), t.shape());
  }
  Weight counted(Weight w) {
    w.data = counted(w.data);
    w.scale = counted(w.scale);
    w.aux = counted(w.aux);
    return w;
  }

  std::shared_ptr<Counts> counts_ = std::make_shared<Counts>();
};

class EngineCacheSizing : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ops_ = std::make_unique<FakeDeviceOps>();
    model_ = std::make_unique<Model>(Model::load(*ops_, DSV4_TINY_MODEL_DIR));
    cpu_ = std::make_unique<cpu::CpuOps>(2);
    cpu_model_ = std::make_unique<Model>(Model::load(*cpu_, DSV4_TINY_MODEL_DIR));
  }
  static void TearDownTestSuite() {
    cpu_model_.reset();
    cpu_.reset();
    model_.reset();
    ops_.reset();
  }
  void SetUp() override {
    ops_->other_bytes = 100 * kMiB;
    ops_->device_memory_calls = 0;
  }
  static EngineConfig config(double utilization) {
    EngineConfig c;
    c.max_model_len = 512;
    c.max_num_seqs = 8;
    c.max_num_batched_tokens = 48;
    c.block_size = 16;
    c.enable_prefix_caching = true;
    c.gpu_memory_utilization = utilization;
    return c;
  }
  // The caches' bytes: kv_cache_dtype auto packs them on a backend that reads packed entries.
  static int64_t fixed_bytes() { return SequenceCache::fixed_bytes(model_->config(), DType::kF8E4M3); }
  static int64_t block_bytes() { return CachePool::block_bytes(model_->config(), DType::kF8E4M3, 16); }
  // A device on which the weights, the rest and `room` fill `utilization` of the total.
  static int64_t total_for(double utilization, int64_t room) {
    return static_cast<int64_t>(std::ceil(static_cast<double>(ops_->live() + ops_->other_bytes + room) / utilization));
  }

  static std::unique_ptr<FakeDeviceOps> ops_;
  static std::unique_ptr<Model> model_;
  static std::unique_ptr<cpu::CpuOps> cpu_;
  static std::unique_ptr<Model> cpu_model_;
};
std::unique_ptr<FakeDeviceOps> EngineCacheSizing::ops_;
std::unique_ptr<Model> EngineCacheSizing::model_;
std::unique_ptr<cpu::CpuOps> EngineCacheSizing::cpu_;
std::unique_ptr<Model> EngineCacheSizing::cpu_model_;

// The share less what is in use, the profiled step's peak and the snapshots, in whole blocks
// beside the fixed state; then serving prompts up to max_model_len in chunks of the step's size,
// with prefix caching's snapshots and one request's prompt logprobs (a step of the profiled
// kind), never holds more than the share.
TEST_F(EngineCacheSizing, TheUtilizationSizesTheCachesAndServingStaysInsideTheShare) {
  const double u = 0.8;
  ops_->total_bytes = total_for(u, 200 * kMiB);
  const int64_t in_use = ops_->live() + ops_->other_bytes;
  Engine engine(*model_, *ops_, config(u));
  const CacheSizing& s = engine.cache_sizing();
  ASSERT_EQ(s.rule, CacheSizing::Rule::kGpuMemoryUtilization);
  EXPECT_FALSE(s.no_device_memory);
  EXPECT_EQ(s.budget.utilization, u);
  EXPECT_EQ(s.budget.total_bytes, ops_->total_bytes);
  EXPECT_EQ(s.budget.used_bytes, in_use);  // the weights and the rest: the step's tensors are gone
  EXPECT_GT(s.budget.activation_bytes, 0);
  EXPECT_EQ(s.budget.snapshot_bytes, (16 + 8) * SequenceCache::snapshot_bytes(model_->config(), DType::kF8E4M3));
  const int64_t share = static_cast<int64_t>(std::floor(u * static_cast<double>(ops_->total_bytes)));
  const int64_t cache = share - in_use - s.budget.activation_bytes - s.budget.snapshot_bytes;
  EXPECT_EQ(engine.config().num_cache_blocks, (cache - 8 * fixed_bytes()) / block_bytes());
  EXPECT_LE(engine.cache_bytes(), cache);
  EXPECT_GT(engine.config().num_cache_blocks, 8 * 512 / 16);  // 200 MiB hold more than 8 requests

  ops_->device_memory();  // the peak from here on
  std::vector<RequestHandle> handles;
  for (int i = 0; i < 12; ++i) {
    GenerateRequest r;
    const int64_t prompt = 130 + 37 * i;  // up to 537: past the snapshot points, all but a few near max_model_len
    for (int64_t k = 0; k < std::min<int64_t>(prompt, 508); ++k) r.prompt.push_back(static_cast<int32_t>((k * 7 + i) % 1000));
    r.stop.max_tokens = 4;
    r.stop.ignore_eos = true;
    if (i == 11) r.prompt_logprobs = 0;  // its chunks take every token's logits, as the profiled step
    handles.push_back(engine.submit(std::move(r)));
  }
  for (int i = 0; i < 10000 && engine.step(); ++i) {
  }
  for (RequestHandle& h : handles)
    while (!h.done()) {
      const OutputChunk c = h.next();
      if (c.finish) {
        EXPECT_EQ(*c.finish, FinishReason::kLength) << c.error;
      }
    }
  EXPECT_GT(engine.stats().prefix_snapshots, 0);
  EXPECT_LE(ops_->other_bytes + ops_->peak(), share) << "serving held more than the share";
  std::printf("[measured] fake device: share %lld bytes, in use %lld, activations' peak %lld (48-token step), "
              "snapshots %lld, caches %lld; serving held at most %lld\n",
              static_cast<long long>(share), static_cast<long long>(in_use),
              static_cast<long long>(s.budget.activation_bytes), static_cast<long long>(s.budget.snapshot_bytes),
              static_cast<long long>(engine.cache_bytes()), static_cast<long long>(ops_->other_bytes + ops_->peak()));
}

// --kv-cache-memory-bytes wins over the utilization (as in vLLM) and num_cache_blocks over both;
// neither profiles the device.
TEST_F(EngineCacheSizing, BytesAndBlocksWinOverTheUtilization) {
  ops_->total_bytes = total_for(0.8, 200 * kMiB);
  EngineConfig c = config(0.8);
  c.cache_memory_bytes = 8 * fixed_bytes() + 40 * block_bytes();
  {
    Engine engine(*model_, *ops_, c);
    EXPECT_EQ(engine.cache_sizing().rule, CacheSizing::Rule::kCacheMemoryBytes);
    EXPECT_EQ(engine.config().num_cache_blocks, 40);
  }
  c.num_cache_blocks = 100;
  {
    Engine engine(*model_, *ops_, c);
    EXPECT_EQ(engine.cache_sizing().rule, CacheSizing::Rule::kNumCacheBlocks);
    EXPECT_EQ(engine.config().num_cache_blocks, 100);
  }
  EXPECT_EQ(ops_->device_memory_calls, 0);
}

// Without device memory (the CPU backend), or at utilization 0, the caches hold max_num_seqs
// sequences of max_model_len, as before; the first says the utilization did not apply.
TEST_F(EngineCacheSizing, WithoutDeviceMemoryOrAtZeroTheLongestRequestsSizeTheCaches) {
  {
    Engine engine(*cpu_model_, *cpu_, config(0.9));
    EXPECT_EQ(engine.cache_sizing().rule, CacheSizing::Rule::kLongestRequests);
    EXPECT_TRUE(engine.cache_sizing().no_device_memory);
    EXPECT_EQ(engine.config().num_cache_blocks, 8 * 512 / 16);
  }
  ops_->total_bytes = total_for(0.8, 200 * kMiB);
  Engine engine(*model_, *ops_, config(0));
  EXPECT_EQ(engine.cache_sizing().rule, CacheSizing::Rule::kLongestRequests);
  EXPECT_FALSE(engine.cache_sizing().no_device_memory);
  EXPECT_EQ(engine.config().num_cache_blocks, 8 * 512 / 16);
  EXPECT_EQ(ops_->device_memory_calls, 0);
  expect_usage_error([&] { Engine e(*model_, *ops_, config(1.5)); }, {"gpu_memory_utilization = 1.5", "[0, 1]"});
}

// A share below the weights, and a share that leaves less than one sequence of max_model_len
// (checked before the profiled step takes one sequence's caches), are refused with the numbers.
TEST_F(EngineCacheSizing, ASmallShareIsRefusedWithTheNumbers) {
  ops_->total_bytes = total_for(0.8, 0);  // 0.5 of it is less than the weights and the rest
  const int64_t in_use = ops_->live() + ops_->other_bytes;
  expect_usage_error([&] { Engine e(*model_, *ops_, config(0.5)); },
                     {"--gpu-memory-utilization 0.50", "(" + std::to_string(in_use) + " bytes) are in use",
                      "(" + std::to_string(ops_->total_bytes) + " bytes)"});
  const int64_t snapshots = 24 * SequenceCache::snapshot_bytes(model_->config(), DType::kF8E4M3);
  ops_->total_bytes = total_for(0.8, snapshots + 8 * fixed_bytes() + 10 * block_bytes());  // 10 of 32 blocks
  expect_usage_error([&] { Engine e(*model_, *ops_, config(0.8)); },
                     {"less than one sequence of max_model_len 512", "lower --max-model-len"});
  EXPECT_EQ(ops_->live() + ops_->other_bytes, in_use);  // nothing left behind
}

// Data-parallel ranks (runtime/engine.h) profile their devices together, each rank's step
// exchanging its MoE rows with the other's, and each sizes its caches from its own device: a rank
// holding half of the routed experts has their bytes more room than the whole model leaves.
TEST_F(EngineCacheSizing, DataParallelRanksProfileTogetherAndSizeTheirOwnDevices) {
  ops_->total_bytes = total_for(0.8, 200 * kMiB);
  const std::vector<std::unique_ptr<ExpertComm>> group = in_process_expert_group(2);
  std::vector<std::unique_ptr<FakeDeviceOps>> devices;
  std::vector<Model> shares;
  std::vector<EngineRank> ranks;
  for (int r = 0; r < 2; ++r) devices.push_back(std::make_unique<FakeDeviceOps>());
  for (int r = 0; r < 2; ++r) shares.push_back(Model::load(*devices[static_cast<size_t>(r)], DSV4_TINY_MODEL_DIR, {}, {r, 2}));
  for (int r = 0; r < 2; ++r) {
    FakeDeviceOps& d = *devices[static_cast<size_t>(r)];
    d.other_bytes = ops_->other_bytes;
    d.total_bytes = ops_->total_bytes;  // the whole model's device
    EXPECT_LT(d.live(), ops_->live());
    ranks.push_back({&shares[static_cast<size_t>(r)], &d, group[static_cast<size_t>(r)].get()});
  }
  const int64_t whole_blocks = Engine(*model_, *ops_, config(0.8)).config().num_cache_blocks;
  const int64_t in_use = devices[0]->live() + devices[0]->other_bytes;
  Engine engine(ranks, config(0.8));
  const CacheSizing& s = engine.cache_sizing();
  ASSERT_EQ(s.rule, CacheSizing::Rule::kGpuMemoryUtilization);
  EXPECT_EQ(s.budget.used_bytes, in_use);
  EXPECT_GT(engine.config().num_cache_blocks, whole_blocks);
  EXPECT_EQ(engine.stats().cache_blocks_total, 2 * engine.config().num_cache_blocks);
}

}  // namespace
}  // namespace dsv4
