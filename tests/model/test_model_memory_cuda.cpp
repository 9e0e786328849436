// Device memory on the GPU: CudaOps::device_memory reports the device (total > free > 0), a
// tensor's bytes as held while it lives and as free once it is gone (the pool trimmed), and its
// peak; an engine on the tiny model sized by --gpu-memory-utilization u gets caches inside
// u x total less what is in use and the profiled step's peak, and serving prompts of up to
// max_model_len in chunks of max_num_batched_tokens holds no more than u x total. Skips where no
// GPU exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device.h"
#include "model_test_util.h"
#include "runtime/engine.h"

namespace dsv4::testing {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

double gib(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kGiB); }

TEST(CudaDeviceMemory, ReportsTheDeviceATensorWhileItLivesAndItsPeak) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device on this machine";
  cuda::CudaOps ops;
  const std::optional<DeviceMemory> start = ops.device_memory();
  ASSERT_TRUE(start.has_value());
  EXPECT_GT(start->total_bytes, start->free_bytes);
  EXPECT_GT(start->free_bytes, 0);
  DeviceMemory held;
  {
    const DeviceTensor t = ops.alloc(DType::kI8, {kGiB});
    held = *ops.device_memory();
    EXPECT_GE(held.backend_bytes - start->backend_bytes, kGiB);
    EXPECT_GE(start->free_bytes - held.free_bytes, kGiB);
    EXPECT_GE(held.peak_backend_bytes, held.backend_bytes);
  }
  // The pool kept the freed block; device_memory gave it back to the device. (Another process
  // on the GPU could move free_bytes: the margin is 256 MiB.)
  const DeviceMemory freed = *ops.device_memory();
  EXPECT_GE(freed.peak_backend_bytes, held.backend_bytes);  // the tensor lived into this period
  EXPECT_LE(freed.backend_bytes, held.backend_bytes - kGiB);
  EXPECT_GE(freed.free_bytes, held.free_bytes + kGiB - 256 * kMiB);
  std::printf("[measured] device: %.1f GiB, %.1f GiB free at start, the backend's pool %.3f GiB\n",
              gib(start->total_bytes), gib(start->free_bytes), gib(start->backend_bytes));
}

TEST(CudaEngineMemory, TheUtilizationSizedCachesAndServingFitTheShare) {
  if (!cuda::device_available()) GTEST_SKIP() << "no CUDA device on this machine";
  cuda::CudaOps ops;
  const Model model = Model::load(ops, tiny_model_dir());
  const double u = 0.1;
  EngineConfig c;
  c.max_model_len = 1024;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 512;
  c.enable_prefix_caching = true;
  c.gpu_memory_utilization = u;
  Engine engine(model, ops, c);
  const CacheSizing& s = engine.cache_sizing();
  ASSERT_EQ(s.rule, CacheSizing::Rule::kGpuMemoryUtilization);
  const GpuMemoryBudget& b = s.budget;
  const auto share = static_cast<int64_t>(std::floor(u * static_cast<double>(b.total_bytes)));
  EXPECT_GT(b.used_bytes, 0);
  EXPECT_GT(b.activation_bytes, 0);
  EXPECT_LE(engine.cache_bytes(), share - b.used_bytes - b.activation_bytes - b.snapshot_bytes);
  EXPECT_GE(engine.config().num_cache_blocks, 8 * 1024 / 64);

  const DeviceMemory made = *ops.device_memory();  // the caches made; the serving period starts
  std::vector<RequestHandle> handles;
  for (int i = 0; i < 8; ++i) {
    GenerateRequest r;
    r.prompt = test_ids(1016 - 97 * i, model.config()->vocab_size, 20 + static_cast<uint32_t>(i));
    r.stop.max_tokens = 8;
    r.stop.ignore_eos = true;
    handles.push_back(engine.submit(std::move(r)));
  }
  while (engine.step()) {
  }
  for (RequestHandle& h : handles)
    while (!h.done()) {
      const OutputChunk chunk = h.next();
      if (chunk.finish) {
        EXPECT_EQ(*chunk.finish, FinishReason::kLength) << chunk.error;
      }
    }
  const DeviceMemory served = *ops.device_memory();
  // What the device held at most while serving: what was in use with the caches made, and what
  // the pool took beyond that (the sequences' fixed state, snapshots, activations). The margin is
  // the pool's granularity over the caches' few allocations.
  const int64_t peak_used = (made.total_bytes - made.free_bytes) + (served.peak_backend_bytes - made.backend_bytes);
  EXPECT_LE(peak_used, share + 64 * kMiB);
  std::printf("[measured] --gpu-memory-utilization %.2f of %.1f GiB: in use after loading %.3f GiB, activations' "
              "peak %.3f GiB (a %lld-token step), snapshots up to %.3f GiB, caches %.2f GiB (%lld blocks); "
              "serving held at most %.2f GiB of the %.2f GiB share\n",
              u, gib(b.total_bytes), gib(b.used_bytes), gib(b.activation_bytes),
              static_cast<long long>(c.max_num_batched_tokens), gib(b.snapshot_bytes), gib(engine.cache_bytes()),
              static_cast<long long>(engine.config().num_cache_blocks), gib(peak_used), gib(share));
}

}  // namespace
}  // namespace dsv4::testing
