// ForkJoin and CudaOps::fork_join on real streams: side tasks run on their own streams and really
// overlap the main task; the fork orders them after earlier work and the join orders later work
// after them; an exception joins and restores the stream; the same calls work under stream capture
// (with CudaOps' stream-ordered allocations inside); FP8 GEMMs on several streams at once give the
// sequential bits; an upload does not wait for the device, yet its host buffer may be reused at
// once. Skips where no GPU exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/fork_join.h"
#include "core/numeric.h"
#include "cuda_test_util.h"
#include "fork_join_test_kernels.h"

namespace dsv4::testing {
namespace {

constexpr int64_t kSlowCycles = 20'000'000;      // about 10 ms: later work that does not wait sees 0
constexpr int64_t kMaxWaitCycles = 4'000'000'000;  // about 2 s: how long a side task waits for main

// Slots of the test's int buffer.
enum Slot { kX, kA, kB, kC, kD, kE, kFlag, kSaw, kSlots };

class ForkJoinCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    DSV4_SKIP_WITHOUT_GPU();
    DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&main_, cudaStreamNonBlocking));
    fork_join_ = std::make_unique<cuda::ForkJoin>();
    ints_ = std::make_unique<DeviceBuffer<int>>(kSlots);
    zero();
    current_ = main_;
  }
  void TearDown() override {
    fork_join_.reset();
    ints_.reset();
    if (main_ != nullptr) cudaStreamDestroy(main_);
  }

  void zero() { DSV4_CUDA_CHECK(cudaMemsetAsync(ints_->get(), 0, kSlots * sizeof(int), main_)); }
  int* at(Slot s) const { return ints_->get() + s; }
  // The buffer once everything enqueued on the main stream is done.
  std::vector<int> values() {
    DSV4_CUDA_CHECK(cudaStreamSynchronize(main_));
    return ints_->download();
  }
  void run(const ForkJoinTasks& tasks) {
    fork_join_->run(tasks, main_, [this](cudaStream_t s) {
      current_ = s;
      ++switches_;
    });
  }

  cudaStream_t main_ = nullptr;
  cudaStream_t current_ = nullptr;  // what the backend's current stream would be
  int switches_ = 0;
  std::unique_ptr<cuda::ForkJoin> fork_join_;
  std::unique_ptr<DeviceBuffer<int>> ints_;
};

TEST_F(ForkJoinCuda, SideTasksRunOnTheirOwnStreamsAndEmptySlotsAreSkipped) {
  std::array<cudaStream_t, kMaxSideTasks> seen{};
  cudaStream_t main_seen = nullptr;
  ForkJoinTasks tasks;
  tasks.main = [&] { main_seen = current_; };
  tasks.side[0] = [&] { seen[0] = current_; };
  tasks.side[2] = [&] { seen[2] = current_; };
  run(tasks);
  EXPECT_EQ(main_seen, main_);
  EXPECT_EQ(seen[0], fork_join_->side_stream(0));
  EXPECT_EQ(seen[1], nullptr);
  EXPECT_EQ(seen[2], fork_join_->side_stream(2));
  EXPECT_NE(seen[0], main_);
  EXPECT_NE(seen[0], seen[2]);
  EXPECT_EQ(current_, main_);
  EXPECT_EQ(switches_, 4) << "a switch to and from each non-empty side slot, none for the empty one";
}

TEST_F(ForkJoinCuda, ForkWaitsForEarlierWorkAndJoinOrdersLaterWork) {
  slow_write(at(kX), 7, kSlowCycles, main_);
  ForkJoinTasks tasks;
  tasks.side[0] = [&] { add_ints(at(kX), nullptr, 1, at(kB), current_); };  // 8 only after the slow write
  tasks.side[1] = [&] { slow_write(at(kC), 5, kSlowCycles, current_); };
  tasks.main = [&] { add_ints(at(kX), nullptr, 2, at(kA), current_); };
  run(tasks);
  add_ints(at(kB), at(kC), 0, at(kD), main_);  // 13 only after both side tasks
  const std::vector<int> v = values();
  EXPECT_EQ(v[kA], 9);
  EXPECT_EQ(v[kB], 8);
  EXPECT_EQ(v[kC], 5);
  EXPECT_EQ(v[kD], 13);
}

// The side task waits for a flag the main task sets, enqueued after it: on one stream it would
// time out. (Compute-sanitizer serialises kernels, so its runs leave this test out.) Both kernels
// are launched once first: with CUDA's lazy module loading, the first launch of set_flag would
// load its module while the spinning kernel holds the device, and wait for it.
TEST_F(ForkJoinCuda, SideTasksRunConcurrentlyWithTheMainTask) {
  set_flag(at(kE), main_);
  wait_for_flag(at(kE), at(kSaw), 1, main_);
  zero();
  ForkJoinTasks tasks;
  tasks.side[0] = [&] { wait_for_flag(at(kFlag), at(kSaw), kMaxWaitCycles, current_); };
  tasks.main = [&] { set_flag(at(kFlag), current_); };
  run(tasks);
  EXPECT_EQ(values()[kSaw], 1);
}

TEST_F(ForkJoinCuda, AnExceptionJoinsTheSideTasksAndRestoresTheStream) {
  bool main_ran = false;
  ForkJoinTasks side_throws;
  side_throws.side[0] = [&] {
    slow_write(at(kC), 3, kSlowCycles, current_);
    throw std::runtime_error("side task failed");
  };
  side_throws.main = [&] { main_ran = true; };
  EXPECT_THROW(run(side_throws), std::runtime_error);
  EXPECT_EQ(current_, main_);
  EXPECT_FALSE(main_ran);
  add_ints(at(kC), nullptr, 0, at(kD), main_);
  EXPECT_EQ(values()[kD], 3) << "the side work enqueued before the throw is joined";

  ForkJoinTasks main_throws;
  main_throws.side[1] = [&] { slow_write(at(kB), 4, kSlowCycles, current_); };
  main_throws.main = [&] { throw std::runtime_error("main task failed"); };
  EXPECT_THROW(run(main_throws), std::runtime_error);
  EXPECT_EQ(current_, main_);
  add_ints(at(kB), nullptr, 0, at(kE), main_);
  EXPECT_EQ(values()[kE], 4);

  cudaStream_t seen = nullptr;
  ForkJoinTasks after;
  after.side[0] = [&] { seen = current_; };
  run(after);
  EXPECT_EQ(seen, fork_join_->side_stream(0)) << "a fork/join after a failed one uses the side streams again";
}

TEST_F(ForkJoinCuda, ANestedForkJoinRunsInOrderOnTheTaskStream) {
  std::vector<cudaStream_t> inner;
  ForkJoinTasks tasks;
  tasks.side[0] = [&] {
    ForkJoinTasks nested;
    nested.main = [&] { inner.push_back(current_); };
    nested.side[1] = [&] { inner.push_back(current_); };
    run(nested);
  };
  run(tasks);
  const std::vector<cudaStream_t> want(2, fork_join_->side_stream(0));
  EXPECT_EQ(inner, want);
  EXPECT_EQ(current_, main_);
}

TEST_F(ForkJoinCuda, WorksUnderStreamCaptureWithTheEventsAsGraphEdges) {
  std::array<cudaStreamCaptureStatus, kMaxSideTasks> side_capturing{};
  DSV4_CUDA_CHECK(cudaStreamBeginCapture(main_, cudaStreamCaptureModeGlobal));
  slow_write(at(kX), 4, 1000, main_);
  ForkJoinTasks tasks;
  tasks.side[0] = [&] {
    DSV4_CUDA_CHECK(cudaStreamIsCapturing(current_, &side_capturing[0]));
    add_ints(at(kX), nullptr, 1, at(kB), current_);
  };
  tasks.side[2] = [&] {
    DSV4_CUDA_CHECK(cudaStreamIsCapturing(current_, &side_capturing[2]));
    add_ints(at(kX), nullptr, 2, at(kC), current_);
  };
  tasks.main = [&] { add_ints(at(kX), nullptr, 3, at(kA), current_); };
  run(tasks);
  add_ints(at(kA), at(kB), 0, at(kE), main_);
  add_ints(at(kE), at(kC), 0, at(kD), main_);
  cudaGraph_t graph = nullptr;
  DSV4_CUDA_CHECK(cudaStreamEndCapture(main_, &graph));  // fails if a side stream was left unjoined
  EXPECT_EQ(side_capturing[0], cudaStreamCaptureStatusActive);
  EXPECT_EQ(side_capturing[2], cudaStreamCaptureStatusActive);
  size_t nodes = 0;
  DSV4_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(nodes, 6u) << "six kernels; the events are edges, not nodes";
  cudaGraphExec_t exec = nullptr;
  DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 2; ++launch) {
    zero();
    DSV4_CUDA_CHECK(cudaGraphLaunch(exec, main_));
    const std::vector<int> v = values();
    EXPECT_EQ(v[kA], 7);
    EXPECT_EQ(v[kB], 5);
    EXPECT_EQ(v[kC], 6);
    EXPECT_EQ(v[kD], 18);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

// ---- CudaOps::fork_join --------------------------------------------------------------------

std::vector<float> download_floats(Ops& ops, const DeviceTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  ops.download(t.view(), host_view(v.data(), DType::kF32, t.shape()));
  return v;
}

DeviceTensor upload_floats(Ops& ops, const std::vector<float>& v) {
  DeviceTensor t = ops.alloc(DType::kF32, {static_cast<int64_t>(v.size())});
  ops.upload(host_view(v.data(), DType::kF32, t.shape()), t.view());
  return t;
}

cuda::CudaOptions with_mode(MultiStreamMode mode, int64_t auto_max_tokens = 2048) {
  cuda::CudaOptions o;
  o.multi_stream.mode = mode;
  o.multi_stream.auto_max_tokens = auto_max_tokens;
  return o;
}

// The stream CudaOps enqueues on inside a side task of a fork/join of `tokens` tokens.
cudaStream_t side_task_stream(cuda::CudaOps& ops, int64_t tokens) {
  cudaStream_t seen = nullptr;
  ForkJoinTasks tasks;
  tasks.tokens = tokens;
  tasks.side[1] = [&] { seen = ops.stream(); };
  ops.fork_join(tasks);
  return seen;
}

TEST(CudaOpsForkJoin, TheModeDecidesWhetherSideTasksGetSideStreams) {
  DSV4_SKIP_WITHOUT_GPU();
  cuda::CudaOps off(with_mode(MultiStreamMode::kOff)), on(with_mode(MultiStreamMode::kOn)),
      automatic(with_mode(MultiStreamMode::kAuto, 16));
  EXPECT_EQ(side_task_stream(off, 1), off.stream());
  EXPECT_NE(side_task_stream(on, 100000), on.stream());
  EXPECT_NE(side_task_stream(automatic, 16), automatic.stream());
  EXPECT_EQ(side_task_stream(automatic, 17), automatic.stream());
}

TEST(CudaOpsForkJoin, TensorsMadeInSideTasksCrossTheJoin) {
  DSV4_SKIP_WITHOUT_GPU();
  cuda::CudaOps ops(with_mode(MultiStreamMode::kOn));
  std::vector<float> values(4096);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 256) * 0.5f - 7.0f;
  const DeviceTensor in = upload_floats(ops, values);
  const cudaStream_t main_stream = ops.stream();
  DeviceTensor from_side0, from_side1;
  ForkJoinTasks tasks;
  tasks.side[0] = [&] {
    const DeviceTensor scratch = ops.alloc(DType::kF32, in.shape());  // dies in the side task
    ops.copy({in.view(), scratch.view()});
    from_side0 = ops.alloc(DType::kBF16, in.shape());
    ops.copy({scratch.view(), from_side0.view()});
  };
  tasks.side[1] = [&] {
    from_side1 = ops.alloc(DType::kF32, in.shape());
    ops.copy({in.view(), from_side1.view()});
  };
  ops.fork_join(tasks);
  EXPECT_EQ(ops.stream(), main_stream);
  DeviceTensor back = ops.alloc(DType::kF32, in.shape());
  ops.copy({from_side0.view(), back.view()});
  EXPECT_EQ(download_floats(ops, back), values);  // all exact in bf16
  EXPECT_EQ(download_floats(ops, from_side1), values);
}

TEST(CudaOpsForkJoin, AllocationsAndForkJoinsWorkUnderCapture) {
  DSV4_SKIP_WITHOUT_GPU();
  cuda::CudaOps ops(with_mode(MultiStreamMode::kOn));
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 17) - 3.0f;
  const DeviceTensor in = upload_floats(ops, values);
  const DeviceTensor out_main = ops.alloc(DType::kF32, in.shape()), out_side = ops.alloc(DType::kF32, in.shape());
  DSV4_CUDA_CHECK(cudaStreamBeginCapture(ops.stream(), cudaStreamCaptureModeGlobal));
  ForkJoinTasks tasks;
  tasks.side[0] = [&] {
    const DeviceTensor scratch = ops.alloc(DType::kBF16, in.shape());
    ops.copy({in.view(), scratch.view()});
    ops.copy({scratch.view(), out_side.view()});
  };
  tasks.main = [&] {
    const DeviceTensor scratch = ops.alloc(DType::kF32, in.shape());
    ops.copy({in.view(), scratch.view()});
    ops.copy({scratch.view(), out_main.view()});
  };
  ops.fork_join(tasks);
  cudaGraph_t graph = nullptr;
  DSV4_CUDA_CHECK(cudaStreamEndCapture(ops.stream(), &graph));
  cudaGraphExec_t exec = nullptr;
  DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  DSV4_CUDA_CHECK(cudaGraphLaunch(exec, ops.stream()));
  EXPECT_EQ(download_floats(ops, out_main), values);
  EXPECT_EQ(download_floats(ops, out_side), values);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST(CudaOpsForkJoin, TensorsThatOutliveTheBackendAreFreed) {
  DSV4_SKIP_WITHOUT_GPU();
  DeviceTensor survivor;
  {
    cuda::CudaOps ops;
    survivor = upload_floats(ops, std::vector<float>(300, 1.5f));
  }
  survivor = DeviceTensor();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// FP8 GEMMs on three streams at once (the cuBLASLt path, with K large enough for the algorithms
// that use a workspace) give the bits they give one after another.
TEST(CudaOpsForkJoin, ConcurrentFp8GemmsGiveTheSequentialBits) {
  DSV4_SKIP_WITHOUT_GPU();
  constexpr int64_t m = 16, k = 7168;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto random_fp8 = [&](int64_t n) {
    std::pair<Tensor, Tensor> w{Tensor(DType::kF8E4M3, {n, k}), Tensor(DType::kF8E8M0, {(n + 127) / 128, k / 128})};
    for (int64_t i = 0; i < w.first.numel(); ++i) w.first.data<uint8_t>()[i] = float_to_e4m3(normal(rng) * 64.0f);
    for (int64_t i = 0; i < w.second.numel(); ++i) w.second.data<uint8_t>()[i] = static_cast<uint8_t>(118 + rng() % 6);
    return w;
  };
  const auto w1 = random_fp8(512), w2 = random_fp8(384);
  Tensor x(DType::kBF16, {m, k});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint16_t>()[i] = float_to_bf16(normal(rng));

  // y[0] = x w1^T (main), y[1] = x w2^T (side 0), y[2] = x w1^T (side 1), as raw bf16 bits.
  const auto run = [&](MultiStreamMode mode) {
    cuda::CudaOps ops(with_mode(mode));
    const auto load = [&](const std::pair<Tensor, Tensor>& w) {
      LoadWeightParams p;
      p.name = "fp8";
      p.format = WeightFormat::kFp8;
      p.weight = w.first.view();
      p.scale = w.second.view();
      return ops.load_weight(p);
    };
    const Weight gw1 = load(w1), gw2 = load(w2);
    DeviceTensor gx = ops.alloc(DType::kBF16, {m, k});
    ops.upload(x.view(), gx.view());
    std::array<DeviceTensor, 3> y = {ops.alloc(DType::kBF16, {m, 512}), ops.alloc(DType::kBF16, {m, 384}),
                                     ops.alloc(DType::kBF16, {m, 512})};
    const auto gemm = [&](const Weight& w, const DeviceTensor& out) {
      ops.linear({gx.view(), &w, ActQuant::kFp8Block128, out.view()});
    };
    ForkJoinTasks tasks;
    tasks.main = [&] { gemm(gw1, y[0]); };
    tasks.side[0] = [&] { gemm(gw2, y[1]); };
    tasks.side[1] = [&] { gemm(gw1, y[2]); };
    ops.fork_join(tasks);
    std::array<std::vector<uint16_t>, 3> bits;
    for (size_t i = 0; i < 3; ++i) {
      bits[i].resize(static_cast<size_t>(y[i].numel()));
      ops.download(y[i].view(), host_view(bits[i].data(), DType::kBF16, y[i].shape()));
    }
    return bits;
  };
  const auto sequential = run(MultiStreamMode::kOff), concurrent = run(MultiStreamMode::kOn);
  EXPECT_EQ(concurrent, sequential);
  EXPECT_EQ(concurrent[2], concurrent[0]);
}

// Upload behind a slow kernel: it returns before the copy runs, and overwriting the host buffer
// right away must not change what arrives, from pageable and from pinned memory alike.
TEST(CudaOpsUpload, ReturnsWithoutWaitingYetTheHostBufferMayBeReused) {
  DSV4_SKIP_WITHOUT_GPU();
  cuda::CudaOps ops;
  const DeviceBuffer<int> busy(1);
  constexpr int64_t n = 1 << 16;
  std::vector<float> expected(n);
  for (int64_t i = 0; i < n; ++i) expected[static_cast<size_t>(i)] = static_cast<float>(i);
  std::vector<float> pageable(n);
  float* pinned = nullptr;
  DSV4_CUDA_CHECK(cudaMallocHost(&pinned, n * sizeof(float)));
  for (float* host : {pageable.data(), pinned}) {
    std::copy(expected.begin(), expected.end(), host);
    slow_write(busy.get(), 1, kSlowCycles, ops.stream());
    const DeviceTensor t = ops.alloc(DType::kF32, {n});
    ops.upload(host_view(host, DType::kF32, {n}), t.view());
    if (host == pageable.data()) {
      EXPECT_EQ(cudaStreamQuery(ops.stream()), cudaErrorNotReady) << "upload waited";
    }
    std::fill(host, host + n, -1.0f);
    std::vector<float> got(n);
    ops.download(t.view(), host_view(got.data(), DType::kF32, {n}));
    EXPECT_EQ(got, expected) << (host == pinned ? "pinned" : "pageable");
  }
  DSV4_CUDA_CHECK(cudaFreeHost(pinned));
}

}  // namespace
}  // namespace dsv4::testing
