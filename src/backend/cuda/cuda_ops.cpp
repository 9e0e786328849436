// CudaOps: device setup, memory, transfers, weight loading, fork/join and the elementwise ops
// (embedding, RMSNorm, RoPE, quantisation-aware rounding, Hadamard, broadcast add). Linears are in
// cuda_linear.cpp, mHC in cuda_mhc.cpp.
#include "backend/cuda/cuda_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/stream_buffer.h"
#include "core/dummy_random.h"
#include "kernels/cuda_check.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gemm/fp8_mma_gemm.h"
#include "kernels/init/dummy_weight.h"
#include "kernels/mhc/mhc.h"
#include "kernels/moe/gate_route_plan.h"
#include "kernels/sampling/sampling.h"
#include "kernels/sm_count.h"
#include "ops/param_checks.h"

namespace dsv4::cuda {

namespace {

void check_same_bytes(const char* op, ConstTensorView a, ConstTensorView b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    throw UsageError(std::string(op) + ": " + std::string(dtype_name(a.dtype())) + shape_str(a.shape()) +
                     " does not match " + std::string(dtype_name(b.dtype())) + shape_str(b.shape()));
}

bool overlaps(ConstTensorView a, ConstTensorView b) {
  const std::byte *a0 = a.bytes(), *a1 = a0 + a.nbytes(), *b0 = b.bytes(), *b1 = b0 + b.nbytes();
  return a0 < b1 && b0 < a1;
}

// hadamard_rows' scale for rows of n: 1 / sqrt(n) rounded to fp32, as the CPU scales.
float hadamard_scale(int64_t n) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n))); }

}  // namespace

CudaOps::CudaOps(CudaOptions options) : options_(options) {
  if (!device_available())
    throw CudaError("CudaOps: no CUDA device can be used (no driver, or the runtime reports no devices)");
  int devices = 0;
  DSV4_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (options_.device < 0 || options_.device >= devices)
    throw CudaError("CudaOps: GPU " + std::to_string(options_.device) + " does not exist (this machine has " +
                    std::to_string(devices) + ")");
  DSV4_CUDA_CHECK(cudaSetDevice(options_.device));
  sm_count_ = kernels::current_device_sm_count();
  // alloc's pool keeps freed memory for reuse instead of handing it back to the driver at every
  // synchronisation (the default threshold of 0 would).
  cudaMemPool_t pool = nullptr;
  DSV4_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, options_.device));
  uint64_t keep_all = std::numeric_limits<uint64_t>::max();
  DSV4_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&owned_stream_, cudaStreamNonBlocking));
  set_stream(owned_stream_);
  try {
    DSV4_CUDA_CHECK(cudaHostAlloc(&fault_host_, 2 * sizeof(int32_t), cudaHostAllocMapped));
    fault_host_[0] = fault_host_[1] = 0;
    DSV4_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&fault_device_), fault_host_, 0));
    const size_t done_bytes =
        static_cast<size_t>(kernels::kHcPreFusedMaxTokens +
                            kernels::gate_route_plan_counters(kernels::kGateRoutePlanMaxExperts)) *
        sizeof(unsigned);
    DSV4_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&hc_pre_done_), done_bytes));
    DSV4_CUDA_CHECK(cudaMemset(hc_pre_done_, 0, done_bytes));
    gate_route_done_ = hc_pre_done_ + kernels::kHcPreFusedMaxTokens;
    fp8_gemm_ = std::make_unique<Fp8BlockGemm>();
    if (options_.multi_stream.mode != MultiStreamMode::kOff) fork_join_ = std::make_unique<ForkJoin>();
  } catch (...) {
    fp8_gemm_.reset();
    if (hc_pre_done_) cudaFree(hc_pre_done_);
    if (fault_host_) cudaFreeHost(fault_host_);
    cudaStreamDestroy(owned_stream_);
    throw;
  }
}

void CudaOps::bind_thread() { DSV4_CUDA_CHECK(cudaSetDevice(options_.device)); }

CudaOps::~CudaOps() {
  // Errors cannot be reported from a destructor. Pending work is waited for (the side streams'
  // work is joined into the current stream at the end of every fork/join), so storage freed
  // afterwards is no longer in use.
  if (stream_ != owned_stream_) cudaStreamSynchronize(stream_);
  cudaStreamSynchronize(owned_stream_);
  fork_join_.reset();
  fp8_gemm_.reset();
  cudaFreeHost(fault_host_);
  cudaFree(hc_pre_done_);
  if (table_stream_ != nullptr) cudaStreamDestroy(table_stream_);
  cudaStreamDestroy(owned_stream_);
  alloc_state_->ops_alive = false;
  alloc_state_->current = nullptr;
}

void CudaOps::synchronize() {
  refuse_while_capturing("synchronize");
  DSV4_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const int32_t fault = fault_host_[0], value = fault_host_[1];
  if (fault == kernels::kFaultNone) return;
  fault_host_[0] = fault_host_[1] = 0;
  const std::string consequence = " (found on the device; the outputs since are not valid)";
  if (fault == kernels::kFaultTokenId)
    throw UsageError("embed: token id " + std::to_string(value) + " is outside the vocabulary" + consequence);
  throw UsageError("moe_experts: routed expert id " + std::to_string(value) + " is outside the layer's experts" +
                   consequence);
}

// alloc's tensors and the ops' scratch (StreamBuffer) come from the device's default stream-ordered
// pool, which keeps the memory of freed blocks for reuse (the release threshold the constructor
// sets) instead of handing it back to the driver, so cudaMemGetInfo counts it as used. To report
// what a new allocation can still get, the pool is trimmed first (cudaMemPoolTrimTo 0, after the
// synchronisation that lets every queued free complete): its reserved memory is then what live
// tensors occupy, at the pool's granularity, and the rest is free to the device again (the next
// forwards take it back from the driver, a one-off cost). The peak is the pool's reserved-memory
// high-water mark, read before the trim and reset after it: reserved rather than used memory,
// since that is what a step takes from the device, blocks held back for another stream's reuse
// and fragmentation included. Memory outside the pool (CUDA graphs' arenas and tables, the CUDA
// context, cuBLAS) is in total - free, not in backend_bytes.
std::optional<DeviceMemory> CudaOps::device_memory() {
  synchronize();  // refused while capturing
  cudaMemPool_t pool = nullptr;
  DSV4_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, options_.device));
  uint64_t peak = 0, reserved = 0, reset = 0;
  DSV4_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &peak));
  DSV4_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  DSV4_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  DSV4_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reset));  // 0: to the current
  size_t free = 0, total = 0;
  DSV4_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return DeviceMemory{static_cast<int64_t>(total), static_cast<int64_t>(free), static_cast<int64_t>(reserved),
                      static_cast<int64_t>(peak)};
}

// Stream-ordered storage: cudaMallocAsync from the device's default pool on the current stream,
// zero-filled on that stream, and freed by cudaFreeAsync on the stream that is current when the
// last reference dies. No call synchronises the device, and all of them can be captured into a
// CUDA graph (as allocation and free nodes).
//
// Why the current stream at free time is the right one under structured fork/join (fork_join,
// ForkJoin): a tensor that dies inside a side task was made and used by that task on its side
// stream (or only read there, made before the fork: but what a side task reads is owned by the
// caller of fork_join, so it outlives the join), so its free is ordered after its uses on that
// stream. A tensor that crosses into or out of side tasks (made before the fork and read by them,
// or made by a side task and read after the join) dies on the main stream after the join, which
// has waited on every side task's done event: every use on every stream is ordered before the
// free. The pool reuses a freed block for another stream only once that order is established.
//
// Tensors that outlive the CudaOps (weights or outputs destroyed after it in tests and tools) are
// freed after a device synchronisation on the legacy default stream: the streams they were used
// on are gone.
namespace {

// Every allocation is a multiple of 256 bytes (at least one), so views start 256-byte aligned.
size_t padded_bytes(DType dtype, const Shape& shape) {
  constexpr size_t kAlign = 256;
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
}

}  // namespace

DeviceTensor CudaOps::alloc(DType dtype, Shape shape) {
  const size_t padded = padded_bytes(dtype, shape);
  DeviceTensor t = alloc_output(dtype, std::move(shape));
  DSV4_CUDA_CHECK(cudaMemsetAsync(t.view().bytes(), 0, padded, stream_));
  return t;
}

DeviceTensor CudaOps::alloc_output(DType dtype, Shape shape) {
  for (int64_t d : shape)
    if (d < 0) throw UsageError("alloc: shape " + shape_str(shape) + " has a negative dimension");
  const size_t padded = padded_bytes(dtype, shape);
  if (capture_ != nullptr) {  // from the graph's arena (capture_arena.h), given back where it dies
    void* block = capture_->arena->allocate(padded, stream_);
    std::shared_ptr<std::byte> storage(static_cast<std::byte*>(block),
                                       [arena = capture_->arena, state = alloc_state_](std::byte* q) {
                                         arena->release(q, state->current);
                                       });
    return DeviceTensor(std::move(storage), dtype, std::move(shape));
  }
  void* p = nullptr;
  const cudaError_t err = cudaMallocAsync(&p, padded, stream_);
  if (err != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it
    throw CudaError("alloc: cudaMallocAsync of " + std::to_string(padded) + " bytes for " +
                    std::string(dtype_name(dtype)) + shape_str(shape) + " failed: " + cudaGetErrorString(err));
  }
  std::shared_ptr<std::byte> storage(static_cast<std::byte*>(p), [state = alloc_state_](std::byte* q) {
    if (state->ops_alive) {
      cudaFreeAsync(q, state->current);
    } else {
      cudaDeviceSynchronize();
      cudaFreeAsync(q, cudaStreamLegacy);
    }
  });
  return DeviceTensor(std::move(storage), dtype, std::move(shape));
}

void CudaOps::fork_join(const ForkJoinTasks& tasks) {
  if (fork_join_ == nullptr || !options_.multi_stream.side_streams_for(tasks.tokens)) {
    run_in_order(tasks);
    return;
  }
  fork_join_->run(tasks, stream_, [this](cudaStream_t s) { set_stream(s); });
}

// Relaxed mode: an op may allocate and copy its tables (upload_tables) on another stream while
// the current one is capturing.
void CudaOps::begin_capture() {
  if (capture_ != nullptr) throw UsageError("begin_capture: a capture is already in progress");
  if (stream_ != owned_stream_) throw UsageError("begin_capture: called inside a fork/join side task");
  if (table_stream_ == nullptr) DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&table_stream_, cudaStreamNonBlocking));
  DSV4_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  capture_ = std::make_unique<Capture>();
  capture_->arena = std::make_shared<CaptureArena>();
}

std::unique_ptr<CudaGraph> CudaOps::end_capture() {
  if (capture_ == nullptr) throw UsageError("end_capture: no capture is in progress");
  std::unique_ptr<Capture> capture = std::move(capture_);
  cudaGraph_t graph = nullptr;
  DSV4_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  size_t nodes = 0;
  const cudaError_t counted = cudaGraphGetNodes(graph, nullptr, &nodes);
  const cudaError_t instantiated = counted == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : counted;
  cudaGraphDestroy(graph);
  DSV4_CUDA_CHECK(instantiated);
  std::vector<std::shared_ptr<void>> keep = std::move(capture->tables);
  for (std::shared_ptr<void>& chunk : capture->arena->close()) keep.push_back(std::move(chunk));
  return std::make_unique<CudaGraph>(exec, nodes, std::move(keep));
}

void CudaOps::abort_capture() noexcept {
  if (capture_ == nullptr) return;
  std::unique_ptr<Capture> capture = std::move(capture_);
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();  // an invalidated capture's error is not the caller's next one
  capture->arena->close();  // the chunks go now: nothing that used them was launched
}

void CudaOps::refuse_while_capturing(const char* what) const {
  if (capture_ != nullptr)
    throw UsageError(std::string(what) + ": not allowed while a CUDA graph is being captured (a forward's inputs "
                                         "come from its step plan, and it never waits for the device)");
}

DeviceTables CudaOps::upload_tables(const TableBytes& bytes) {
  DeviceTables t;
  if (capture_ == nullptr) {
    t.eager_.emplace(bytes.size(), stream_);
    t.eager_->upload(bytes.data(), bytes.size());
    t.base_ = t.eager_->get<const std::byte>();
    return t;
  }
  void* p = nullptr;
  DSV4_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes.size(), 1)));
  std::shared_ptr<void> table(p, [](void* q) { cudaFree(q); });
  DSV4_CUDA_CHECK(cudaMemcpyAsync(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, table_stream_));
  DSV4_CUDA_CHECK(cudaStreamSynchronize(table_stream_));
  capture_->tables.push_back(std::move(table));
  t.base_ = static_cast<const std::byte*>(p);
  return t;
}

// Both transfers return once the host buffer may be reused (upload) or read (download). From
// pageable memory (vectors, mmap'd checkpoints) the driver stages the bytes before
// cudaMemcpyAsync returns, so an upload need not wait for the device, which keeps the host from
// stalling on every small upload of a forward (positions, entry positions inside side tasks); a
// pinned (page-locked) buffer is read by the DMA engine later, so then the copy is waited for.
void CudaOps::upload(ConstTensorView host, TensorView dst) {
  refuse_while_capturing("upload");
  check_same_bytes("upload", host, dst);
  if (host.nbytes() == 0) return;
  cudaPointerAttributes attributes{};
  DSV4_CUDA_CHECK(cudaPointerGetAttributes(&attributes, host.bytes()));
  DSV4_CUDA_CHECK(cudaMemcpyAsync(dst.bytes(), host.bytes(), host.nbytes(), cudaMemcpyHostToDevice, stream_));
  if (attributes.type != cudaMemoryTypeUnregistered) synchronize();
}

void CudaOps::download(ConstTensorView src, TensorView host) {
  refuse_while_capturing("download");
  check_same_bytes("download", src, host);
  if (src.nbytes() == 0) return;
  DSV4_CUDA_CHECK(cudaMemcpyAsync(host.bytes(), src.bytes(), src.nbytes(), cudaMemcpyDeviceToHost, stream_));
  synchronize();
}

void CudaOps::copy(const CopyParams& p) {
  check_params(p);
  if (p.src.numel() == 0 || (p.src.bytes() == p.dst.bytes() && p.src.dtype() == p.dst.dtype())) return;
  ConstTensorView src = p.src;
  std::unique_ptr<StreamBuffer> staged;  // overlapping ranges: copy the source aside first
  if (overlaps(p.src, p.dst)) {
    staged = std::make_unique<StreamBuffer>(p.src.nbytes(), stream_, arena());
    DSV4_CUDA_CHECK(cudaMemcpyAsync(staged->get<std::byte>(), p.src.bytes(), p.src.nbytes(),
                                    cudaMemcpyDeviceToDevice, stream_));
    src = ConstTensorView(staged->get<std::byte>(), p.src.dtype(), p.src.shape());
  }
  if (src.dtype() == p.dst.dtype()) {
    DSV4_CUDA_CHECK(cudaMemcpyAsync(p.dst.bytes(), src.bytes(), src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  kernels::convert_copy({float_ptr(src), float_ptr(p.dst), src.numel()}, stream_);
}

void CudaOps::copy_rows(const CopyRowsParams& p) {
  check_params(p);
  const size_t row_bytes = static_cast<size_t>(p.src.dim(1)) * dtype_size(p.src.dtype());
  std::vector<kernels::ByteRange> ranges;
  for (const RowCopy& c : p.copies)
    if (c.rows > 0)
      ranges.push_back({p.src.bytes() + c.src_row * row_bytes, c.dst.bytes() + c.dst_row * row_bytes,
                        static_cast<int64_t>(c.rows * row_bytes)});
  if (ranges.size() == 1) {
    DSV4_CUDA_CHECK(cudaMemcpyAsync(ranges[0].dst, ranges[0].src, static_cast<size_t>(ranges[0].bytes),
                                    cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  if (ranges.empty()) return;
  TableBytes bytes;
  const size_t at = bytes.add(ranges);
  const DeviceTables table = upload_tables(bytes);
  kernels::copy_byte_ranges(table.at<kernels::ByteRange>(at), static_cast<int64_t>(ranges.size()), stream_);
}

void CudaOps::write_cache_rows(const WriteCacheRowsParams& p) {
  check_params(p);
  const int64_t R = p.src.dim(0);
  if (R == 0) return;
  std::vector<kernels::CacheRowTarget> caches;
  std::vector<int32_t> seq_of_row(static_cast<size_t>(R), -1);
  for (const CacheRows& c : p.seqs) {
    if (c.rows == 0) continue;
    std::fill_n(seq_of_row.begin() + c.src_begin, c.rows, static_cast<int32_t>(caches.size()));
    caches.push_back({c.cache.pool.bytes(), page_table(c.cache), packed_entry(c.cache.pool.dtype(), c.cache.pool.dim(2))});
  }
  if (caches.empty()) return;
  TableBytes bytes;
  const size_t caches_at = bytes.add(caches), rows_at = bytes.add(seq_of_row);
  const DeviceTables table = upload_tables(bytes);
  kernels::write_cache_rows({p.src.bytes(), p.src.dtype() == DType::kBF16, p.dst_rows.data<int32_t>(),
                             table.at<int32_t>(rows_at), table.at<kernels::CacheRowTarget>(caches_at), R,
                             p.src.dim(1) * static_cast<int64_t>(dtype_size(p.src.dtype()))},
                            stream_);
}

void CudaOps::edit_logits(const EditLogitsParams& p) {
  check_params(p);
  kernels::edit_logits({p.x.data<float>(), reinterpret_cast<const LogitEdit*>(p.edits.data<int32_t>()), p.edits.dim(0),
                        p.x.dim(0), p.x.dim(1)},
                       stream_);
}

void CudaOps::mask_logits(const MaskLogitsParams& p) {
  check_params(p);
  kernels::mask_logits({p.x.data<float>(), reinterpret_cast<const uint32_t*>(p.allowed.data<int32_t>()),
                        p.rows.data<int32_t>(), p.rows.dim(0), p.x.dim(0), p.x.dim(1)},
                       stream_);
}

void CudaOps::row_logprobs(const RowLogprobsParams& p) {
  check_params(p);
  kernels::row_logprobs({p.x.data<float>(), p.ids.data<int32_t>(), p.top_counts.data<int32_t>(), p.logprob.data<float>(),
                         p.rank.data<int32_t>(), p.top_ids.data<int32_t>(), p.top_logprobs.data<float>(), p.x.dim(0),
                         p.x.dim(1), p.top_ids.dim(1)},
                        stream_);
}

void CudaOps::sample_rows(const SampleRowsParams& p) {
  check_params(p);
  kernels::sample_rows({p.x.data<float>(), reinterpret_cast<const DrawRow*>(p.rows.data<int64_t>()),
                        p.out.data<int32_t>(), p.x.dim(0), p.x.dim(1)},
                       stream_);
}

// Device layouts: kFp8 and kMxfp4 (cast losslessly to FP8 on the host first) keep e4m3 codes in
// `data` (kF8E4M3 [out, in]) and fp32 block scales in cuBLASLt's layout in `scale` (kF32
// [ceil(out/128), roundup(ceil(in/128), 4)]); with CudaOptions::fp4_experts, kMxfp4 keeps its
// e2m1 codes in `data` and the cast's shifts in `aux`, both re-laid by kernels::e2m1_device_layout
// (kI8 [rows, in/2] and kU8 [rows, in/32], rows = kernels::e2m1_layout_rows(out)), and the cast's
// block scales in `scale`; plain f32/bf16 tensors stay as stored; plain integer tensors become
// kI32 (the CPU's rule, checked for range).
DeviceTensor CudaOps::upload_new(ConstTensorView host) {
  DeviceTensor t = alloc(host.dtype(), host.shape());
  upload(host, t.view());
  return t;
}

DeviceTensor CudaOps::cublaslt_weight_scales(const uint8_t* e8m0, int64_t rows, int64_t cols) {
  const std::vector<float> scales = fp8_weight_scales_for_cublaslt(e8m0, rows, cols);
  const int64_t block_rows = (rows + 127) / 128, scale_cols = static_cast<int64_t>(scales.size()) / block_rows;
  return upload_new(host_view(scales.data(), DType::kF32, {block_rows, scale_cols}));
}

Weight CudaOps::load_weight(const LoadWeightParams& p) {
  Weight w;
  w.name = p.name;
  w.format = p.format;
  const auto load_fp8 = [&](ConstTensorView codes, ConstTensorView e8m0) {
    if (codes.dtype() != DType::kF8E4M3 || codes.rank() != 2)
      throw TensorError(p.name + ": FP8 weight must be a rank-2 " + std::string(dtype_name(DType::kF8E4M3)) +
                        " tensor, got " + std::string(dtype_name(codes.dtype())) + " " + shape_str(codes.shape()));
    const int64_t n = codes.dim(0), k = codes.dim(1);
    const Shape scale_shape = {(n + 127) / 128, (k + 127) / 128};
    if (e8m0.dtype() != DType::kF8E8M0 || e8m0.shape() != scale_shape)
      throw TensorError(p.name + ": FP8 scale must be " + std::string(dtype_name(DType::kF8E8M0)) +
                        shape_str(scale_shape) + ", got " + std::string(dtype_name(e8m0.dtype())) + " " +
                        shape_str(e8m0.shape()));
    w.shape = codes.shape();
    w.data = upload_new(codes);
    w.scale = cublaslt_weight_scales(e8m0.data<uint8_t>(), n, k);
  };
  switch (p.format) {
    case WeightFormat::kFp8:
      load_fp8(p.weight, p.scale);
      break;
    case WeightFormat::kMxfp4: {
      if (!options_.fp4_experts) {
        const Fp8BlockWeight cast = cast_mxfp4_to_fp8(p.weight, p.scale, p.name);
        load_fp8(cast.weight.view(), cast.scale.view());
        break;
      }
      const Mxfp4BlockShifts shifts = mxfp4_block_shifts(p.weight, p.scale, p.name);  // checks the tensors
      const int64_t n = p.weight.dim(0), k = 2 * p.weight.dim(1);
      if (k % 128 != 0)
        throw TensorError(p.name + ": an FP4 weight kept as stored needs inputs in whole blocks of 128, got " +
                          std::to_string(k) + " (--fp4-experts off casts it to FP8)");
      w.shape = {n, k};
      const kernels::E2m1DeviceWeight layout =
          kernels::e2m1_device_layout(p.weight.data<uint8_t>(), shifts.shift.data<uint8_t>(), n, k);
      const int64_t rows = kernels::e2m1_layout_rows(n);
      w.data = upload_new(host_view(layout.codes.data(), DType::kI8, {rows, k / 2}));
      w.aux = upload_new(host_view(layout.shifts.data(), DType::kU8, {rows, k / 32}));
      w.scale = cublaslt_weight_scales(shifts.block_scale.data<uint8_t>(), n, k);
      break;
    }
    case WeightFormat::kPlain: {
      const ConstTensorView& src = p.weight;
      w.shape = src.shape();
      switch (src.dtype()) {
        case DType::kF32:
        case DType::kBF16:
          w.data = upload_new(src);
          break;
        case DType::kI32:
        case DType::kI64: {
          const int64_t n = src.numel();
          std::vector<int32_t> ints(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) {
            const int64_t v = src.dtype() == DType::kI32 ? src.data<int32_t>()[i] : src.data<int64_t>()[i];
            if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
              throw TensorError(p.name + ": element " + std::to_string(i) + " = " + std::to_string(v) +
                                " does not fit in int32");
            ints[static_cast<size_t>(i)] = static_cast<int32_t>(v);
          }
          w.data = upload_new(host_view(ints.data(), DType::kI32, w.shape));
          break;
        }
        default:
          throw TensorError(p.name + ": the CUDA backend cannot use a plain " + std::string(dtype_name(src.dtype())) +
                            " tensor");
      }
      break;
    }
  }
  return w;
}

// The same layouts as load_weight, filled on the device: no host copy of a full-size weight.
Weight CudaOps::dummy_weight(const DummyWeightParams& p) {
  check_params(p);
  Weight w;
  w.name = p.name;
  w.format = p.format;
  w.shape = p.shape;
  const int64_t n = shape_numel(p.shape);
  if (p.format == WeightFormat::kPlain) {
    w.data = alloc(p.dtype, p.shape);
    kernels::dummy_floats({float_ptr(w.data.view()), n, p.key, p.mean, p.std}, stream_);
    return w;
  }
  const int64_t rows = p.shape[0], cols = p.shape[1];
  const int e = dummy_fp8_scale_exponent(p.mean, p.std);
  if (p.format == WeightFormat::kMxfp4 && options_.fp4_experts) {
    // Kept as stored: the bytes of the FP8 dummy's codes taken as e2m1 pairs (values for timing
    // runs, not the other backends'), every shift 0, the FP8 dummy's block scale.
    if (cols % 128 != 0) throw UsageError("dummy_weight: FP4 weight " + p.name + " needs inputs in blocks of 128");
    const int64_t layout_rows = kernels::e2m1_layout_rows(rows);  // kernels::e2m1_device_layout's
    w.data = alloc(DType::kI8, {layout_rows, cols / 2});
    kernels::dummy_e4m3({w.data.view().data<uint8_t>(), layout_rows * cols / 2, p.key, p.mean, p.std, std::ldexp(1.0f, -e)},
                        stream_);
    w.aux = alloc(DType::kU8, {layout_rows, cols / 32});
    DSV4_CUDA_CHECK(cudaMemsetAsync(w.aux.view().bytes(), 0, w.aux.view().nbytes(), stream_));
  } else {
    w.data = alloc(DType::kF8E4M3, p.shape);
    kernels::dummy_e4m3({w.data.view().data<uint8_t>(), n, p.key, p.mean, p.std, std::ldexp(1.0f, -e)}, stream_);
  }
  const std::vector<uint8_t> e8m0(static_cast<size_t>(((rows + 127) / 128) * ((cols + 127) / 128)),
                                  e8m0_from_exponent(e));
  w.scale = cublaslt_weight_scales(e8m0.data(), rows, cols);
  return w;
}

// A bad id is found on the device (the host never waits inside a forward) and reported by the
// next synchronize(): every download, so before any logits are read.
void CudaOps::embed(const EmbedParams& p) {
  check_params(p);
  expect_float("embed", "out", p.out);
  const int64_t T = p.ids.dim(0), n = p.out.dim(1), D = p.out.dim(2);
  expect_shape("embed", "out", p.out, {T, n, D});
  if (p.table == nullptr || p.table->shape.size() != 2 || p.table->shape[1] != D)
    throw UsageError("embed: the table must be [vocab, " + std::to_string(D) + "]");
  const int64_t V = p.table->shape[0];
  const kernels::FloatPtr table = weight_floats("embed", p.table, {V, D});
  kernels::embed_gather({p.ids.data<int32_t>(), table, V, fault_device_, float_ptr(p.out), T, n, D}, stream_);
}

void CudaOps::rms_norm(const RmsNormParams& p) {
  check_params(p);
  expect_float("rms_norm", "y", p.y);
  const int64_t rows = p.x.dim(0), dim = p.x.dim(1);
  const kernels::FloatPtr w = p.weight ? weight_floats("rms_norm", p.weight, {dim}) : kernels::FloatPtr{};
  kernels::rms_norm_rows({float_ptr(p.x), w, float_ptr(p.y), rows, dim, p.eps}, stream_);
}

void CudaOps::rope(const RopeParams& p) {
  check_params(p);
  const int64_t rows = p.x.dim(0), heads = p.x.dim(1), hd = p.x.dim(2);
  kernels::rope_rows({float_ptr(p.x), p.positions.data<int32_t>(), p.inv_freq.data<float>(), rows, heads, hd,
                      p.rope_dim, p.inverse},
                     stream_);
}

void CudaOps::quant_sim(const QuantSimParams& p) {
  check_params(p);
  const int64_t rows = p.x.dim(0), width = p.x.dim(1);
  kernels::quant_sim_rows({float_ptr(p.x), rows, width, p.cols, p.block, p.format == QuantFormat::kE2M1}, stream_);
}

void CudaOps::hadamard(const HadamardParams& p) {
  check_params(p);
  const int64_t rows = p.x.dim(0), n = p.x.dim(1);
  if (n > kernels::kHadamardMaxWidth)
    throw UsageError("hadamard: width " + std::to_string(n) + " exceeds the CUDA kernel's limit of " +
                     std::to_string(kernels::kHadamardMaxWidth));
  kernels::hadamard_rows({float_ptr(p.x), rows, n, hadamard_scale(n)}, stream_);
}

// One launch where the fused kernel takes the call (decode-sized batches), else the ops in turn.
void CudaOps::norm_rope_quant(const NormRopeQuantParams& p) {
  check_params(p);
  const int64_t rows = p.y.dim(0), heads = p.y.dim(1), dim = p.y.dim(2);
  if (overlaps(p.src, p.y) && p.src.bytes() != p.y.bytes())
    throw UsageError("norm_rope_quant: src and y overlap without being the same tensor");
  kernels::NormRopeQuantRowsParams k;
  k.src = float_ptr(p.src);
  k.y = float_ptr(p.y);
  k.vectors = rows * heads;
  k.heads = heads;
  k.dim = dim;
  k.norm = p.norm;
  k.norm_weight = p.norm_weight ? weight_floats("norm_rope_quant", p.norm_weight, {dim}) : kernels::FloatPtr{};
  k.eps = p.eps;
  if (p.rope_dim > 0) {
    k.positions = p.positions.data<int32_t>();
    k.inv_freq = p.inv_freq.data<float>();
    k.rope_dim = p.rope_dim;
  }
  k.hadamard_scale = p.hadamard ? hadamard_scale(dim) : 0.0f;
  k.quant_cols = p.quant_cols;
  k.quant_block = p.quant_block;
  k.quant_e2m1 = p.quant_format == QuantFormat::kE2M1;
  if (!kernels::norm_rope_quant_fits(k)) {
    Ops::norm_rope_quant(p);
    return;
  }
  kernels::norm_rope_quant_rows(k, stream_);
}

void CudaOps::add_broadcast(const AddBroadcastParams& p) {
  check_params(p);
  const int64_t T = p.a.dim(0), n = p.a.dim(1), D = p.a.dim(2);
  expect_float("add_broadcast", "out", p.out);
  kernels::broadcast_add({float_ptr(p.a), float_ptr(p.b), float_ptr(p.out), T, n, D}, stream_);
}

}  // namespace dsv4::cuda
