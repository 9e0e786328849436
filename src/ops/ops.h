// The Ops interface: every computation the DeepSeek-V4 forward (src/model/) needs, one entry per
// op, each taking a Params struct whose fields name their shapes. Backends (src/backend/cpu, later
// CUDA) implement it; the model never sees how. Memory comes from the backend too (alloc), so the
// same model code runs on host or device memory.
//
// Conventions for every Params struct:
// - Tensors are row-major contiguous views. Shapes use T = tokens of the batch, D = hidden size,
//   n = hc_mult streams, H = attention heads, d = head_dim (512), r = rope dims (64).
// - Activation tensors are kF32 or kBF16. An op computes in fp32 and rounds what it stores to the
//   output's dtype, so "stored bf16" in MODEL.md is a kBF16 output and exact-math mode is kF32
//   everywhere. Intermediates inside an op are rounded to the dtype of its main input, `x`.
// - Index tensors are kI32. Optional inputs are empty views (bytes() == nullptr).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "config/model_config.h"
#include "core/tensor.h"
#include "kv/page_table.h"
#include "loader/weights.h"
#include "ops/fork_join.h"

namespace dsv4 {

// A tensor in backend memory (host memory for the CPU backend, device memory for CUDA). Copies
// share the storage, which the backend frees when the last copy goes.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(std::shared_ptr<std::byte> storage, DType dtype, Shape shape)
      : storage_(std::move(storage)), dtype_(dtype), shape_(std::move(shape)) {}

  TensorView view() const { return {storage_.get(), dtype_, shape_}; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return view().dim(i); }
  int64_t numel() const { return shape_numel(shape_); }
  bool empty() const { return storage_ == nullptr; }
  // The same storage seen with another shape of equal element count (UsageError otherwise).
  DeviceTensor reshaped(Shape shape) const;
  // Elements [offset, offset + numel(shape)) as a tensor of `shape`, sharing the storage.
  DeviceTensor part(int64_t offset, Shape shape) const;

 private:
  std::shared_ptr<std::byte> storage_;
  DType dtype_ = DType::kF32;
  Shape shape_;
};

// Rows [begin, end) along dim 0.
TensorView slice_rows(TensorView v, int64_t begin, int64_t end);
ConstTensorView slice_rows(ConstTensorView v, int64_t begin, int64_t end);
inline bool is_empty(ConstTensorView v) { return v.bytes() == nullptr; }

// A checkpoint weight as the backend keeps it for compute.
struct Weight {
  std::string name;
  WeightFormat format = WeightFormat::kPlain;  // how the checkpoint stores it
  Shape shape;                                 // logical shape ([out, in] for linears)
  DeviceTensor data;                           // backend layout (CPU: the exact values in fp32)
  DeviceTensor scale;                          // backend layout; empty where unused (CPU)
  DeviceTensor aux;                            // a third array a backend layout may need; mostly empty
};

// ---- memory ---------------------------------------------------------------------------------

struct LoadWeightParams {
  std::string name;
  WeightFormat format = WeightFormat::kPlain;
  ConstTensorView weight;  // as stored: kPlain any dtype; kFp8 e4m3 [out, in]; kMxfp4 I8 [out, in/2]
  ConstTensorView scale;   // kFp8: e8m0 [ceil(out/128), ceil(in/128)]; kMxfp4: e8m0 [out, in/32]
};

// Random weights made in backend memory, for full-size runs without a checkpoint (`--load-format
// dummy`). Element i (row-major over the logical shape) is mean + std * dummy_normal(key, i)
// (core/dummy_random.h), stored as `format` would store it: kPlain rounded to `dtype`; kFp8 and
// kMxfp4 as e4m3 codes with one pow2 scale for the whole tensor (FP4 experts are drawn as FP8,
// the form the CUDA backend computes them in). Every backend makes the same values.
struct DummyWeightParams {
  std::string name;
  WeightFormat format = WeightFormat::kPlain;
  DType dtype = DType::kBF16;  // kPlain: kBF16 or kF32
  Shape shape;                 // logical shape; kFp8 / kMxfp4: [out, in] (not the packed FP4 shape)
  uint64_t key = 0;
  float mean = 0;
  float std = 1;
};

struct CopyParams {
  ConstTensorView src;  // any float dtype, or any dtype where dst's is the same (a byte copy)
  TensorView dst;       // same element count; values rounded to dst's dtype
};

// Rows [src_row, src_row + rows) of a copy_rows source written to rows [dst_row, dst_row + rows)
// of dst.
struct RowCopy {
  int64_t src_row = 0;
  TensorView dst;       // [*, width], the source's dtype and width
  int64_t dst_row = 0;
  int64_t rows = 0;
};

// Row ranges of one tensor copied into others as one operation: a batch's per-sequence writes
// (window rings, compressed entries, last-token rows) cost one launch, not one per sequence.
// Destinations must not overlap the source or each other.
struct CopyRowsParams {
  ConstTensorView src;  // [T, width] any dtype
  std::span<const RowCopy> copies;
};

// A sequence's cache whose rows live in pages of a pool that sequences share
// (model/cache_pool.h): entry j is row j % page_rows of page table[j / page_rows]
// (kv/page_table.h). The table is plan data in backend memory (StepPlan::block_table) that kernels
// read on the device, so a CUDA graph replays with the next step's pages. An entry whose page is
// -1 (not given yet), past the table or outside the pool has no row: readers treat it as absent
// (each op says how), and a write to it is an error (the CPU throws; the CUDA backend drops the
// row). A contiguous cache is the special case of one page holding every row, table [0].
struct PagedCache {
  TensorView pool;        // [num_pages, page_rows, width] float rows, or u8 packed entries
                          // (kv/packed_entries.h: width = the entry's bytes)
  ConstTensorView table;  // [table pages] i32 page ids
};

// The table as PageTable addresses it (pointers into backend memory; after check_params).
inline PageTable page_table(const PagedCache& c) {
  return {c.table.data<int32_t>(), c.table.numel(), c.pool.dim(1), c.pool.dim(0)};
}

// One sequence's rows of a write_cache_rows source: rows [src_begin, src_begin + rows) go into
// `cache`.
struct CacheRows {
  int64_t src_begin = 0;
  int64_t rows = 0;
  PagedCache cache;     // pool [pages, page_rows, width] of the source's dtype and width, or
                        // u8 packed entries of bf16 rows of the entry's width
};

// Cache writes whose destinations are data, not arguments: source row r goes to entry
// dst_rows[r] of its sequence's cache, or nowhere where dst_rows[r] < 0. The destinations come
// from the forward's step plan (window slots, completed blocks), so the op's arguments are the
// same at every decode step and a CUDA graph can replay it. An entry without a row (past the
// table, or in a page not given) is an error (the CPU throws; the CUDA backend skips the row:
// the plan never makes one).
struct WriteCacheRowsParams {
  ConstTensorView src;       // [R, width] any dtype
  ConstTensorView dst_rows;  // [R] i32
  std::span<const CacheRows> seqs;
};

// The raw distribution's logprobs on the backend (sampling/token_draw.h's draw_row_logprobs, the
// host's bits): for row r of x, the logprob and rank of token ids[r] (NaN and 0, and no top list,
// for an id outside the row: a failed draw's -1) and the first top_counts[r] tokens by logit
// (ties: lower id; NaN never) with their logprobs, the rest of the row's top lists -1 and NaN.
// top_counts[r] in [0, N], N <= kDrawMaxTopLogprobs (the CPU refuses others; CUDA clamps).
struct RowLogprobsParams {
  ConstTensorView x;           // [R, V] f32
  ConstTensorView ids;         // [R] i32
  ConstTensorView top_counts;  // [R] i32
  TensorView logprob;          // [R] f32
  TensorView rank;             // [R] i32
  TensorView top_ids;          // [R, N] i32
  TensorView top_logprobs;     // [R, N] f32
};

// Dense masks on the backend (an output constraint's allowed tokens, allowed_token_ids): row
// rows[m] of x gets -inf wherever bit j % 32 of word j / 32 of allowed[m] is 0. The rows are
// distinct and inside x (the CPU refuses others; CUDA skips them).
struct MaskLogitsParams {
  TensorView x;             // [R, V] f32
  ConstTensorView allowed;  // [M, ceil(V / 32)] i32 bit words
  ConstTensorView rows;     // [M] i32
};

// Sampling's logit edits on the backend (sampling/logit_edit.h), in place: x[e.row, e.id] =
// edited_logit(x[e.row, e.id], e) for every edit e, at most one per element (logit_edits gives one
// per token). An edit outside x is refused on the CPU and skipped on CUDA (which cannot read the
// edits without a wait).
struct EditLogitsParams {
  TensorView x;           // [R, V] f32
  ConstTensorView edits;  // [E, 6] i32: a LogitEdit per row
};

// Drawing the next tokens on the backend: out[r] is the token sampling/token_draw.h's draw picks
// from row r of x under the DrawRow in row r of `rows` (seed, index, temperature, top_p, min_p,
// top_k), the same id draw_token gives on the host, on every backend; -1 where no token can be
// drawn (no finite largest logit). Temperature 0 is the argmax: ties go to the lowest index, NaN
// is never chosen unless it is the row's first value. Only R ids cross to the host, not R x V
// logits.
struct SampleRowsParams {
  ConstTensorView x;     // [R, V] f32, 0 < V <= kDrawMaxVocab
  ConstTensorView rows;  // [R, 4] i64: a DrawRow per row
  TensorView out;        // [R] i32
};

// The memory of a backend's device (Ops::device_memory), what the serving engine sizes its caches
// from (runtime/cache_sizing.h).
struct DeviceMemory {
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;          // held by nothing: not this backend, not the rest of this process, no other process
  int64_t backend_bytes = 0;       // held by the backend's allocations (tensors and op scratch)
  int64_t peak_backend_bytes = 0;  // the most backend_bytes was since the previous device_memory() call
};

// ---- elementwise and normalisation ----------------------------------------------------------

struct EmbedParams {
  ConstTensorView ids;    // [T] i32
  const Weight* table;    // [V, D]
  TensorView out;         // [T, n, D]: every stream gets the token's row (n may be 1)
};

// y = w * (x * rsqrt(mean(x^2) + eps)) per row, in fp32, rounded to y's dtype. y may alias x.
struct RmsNormParams {
  ConstTensorView x;      // [rows, dim]
  const Weight* weight;   // [dim], or nullptr for a weight-free norm (the per-head q norm)
  float eps = 0;
  TensorView y;           // [rows, dim]
};

// Rotates the last rope_dim dims of every vector by its row's position: interleaved pairs
// (x[2i], x[2i+1]) times (cos, sin)(pos * inv_freq[i]); the conjugate when inverse. In place.
struct RopeParams {
  TensorView x;                // [rows, heads, head_dim]
  ConstTensorView positions;   // [rows] i32
  ConstTensorView inv_freq;    // [rope_dim / 2] f32
  int64_t rope_dim = 0;
  bool inverse = false;
};

enum class QuantFormat { kE4M3, kE2M1 };

// Quantisation-aware rounding (MODEL.md §14) of x[:, 0:cols] in blocks of `block` along the row:
// each block takes its value after a round trip through `format` with a pow2 block scale. In place.
struct QuantSimParams {
  TensorView x;            // [rows, width]
  int64_t cols = 0;        // the quantised prefix of each row (a multiple of block)
  int64_t block = 0;
  QuantFormat format = QuantFormat::kE4M3;
};

// x <- H x / sqrt(width) per row, H the Sylvester-order Hadamard matrix. In place.
struct HadamardParams {
  TensorView x;            // [rows, width], width a power of two
};

// The steps a projection's vectors take before attention reads them or a cache keeps them (the
// kv and q paths, the compressors' entries, the indexer's queries): y = src rounded to y's dtype,
// then per vector of dim values, each step optional and in this order: rms_norm (with the weight
// or none), rope (the last rope_dim dims at the row's position), hadamard, quant_sim (the first
// quant_cols dims). Exactly those ops one after another, which the default runs: a backend may
// fuse them only into the same bits.
struct NormRopeQuantParams {
  ConstTensorView src;                  // [rows, heads, dim], any float dtype; may be y itself
  TensorView y;                         // [rows, heads, dim]
  bool norm = false;
  const Weight* norm_weight = nullptr;  // [dim], or nullptr for a weight-free norm
  float eps = 0;
  ConstTensorView positions;            // [rows] i32, with rope_dim > 0
  ConstTensorView inv_freq;             // [rope_dim / 2] f32
  int64_t rope_dim = 0;                 // 0: no rotation
  bool hadamard = false;
  int64_t quant_cols = 0;               // 0: no quantisation rounding
  int64_t quant_block = 0;
  QuantFormat quant_format = QuantFormat::kE4M3;
};

// out[t, j, :] = a[t, j, :] + b[t, :]
struct AddBroadcastParams {
  ConstTensorView a;       // [T, n, D]
  ConstTensorView b;       // [T, D]
  TensorView out;          // [T, n, D]
};

// ---- linears --------------------------------------------------------------------------------

enum class ActQuant {
  kNone,           // x used as is
  kFp8Block128,    // x quantised to e4m3 per 1x128 block along K with pow2 scales (FP8/FP4 linears)
};

// y = x @ w^T, fp32 accumulation, rounded to y's dtype. Each row's result depends only on that
// row of x (so batching never changes a sequence's numbers).
struct LinearParams {
  ConstTensorView x;       // [M, K]
  const Weight* w;         // [N, K]
  ActQuant act_quant = ActQuant::kNone;
  TensorView y;            // [M, N]
};

// Linears of one input: outs[i].y = x @ outs[i].w^T exactly as linear() computes it (the same
// bits), which a backend may run as one launch after quantising x once.
struct LinearOut {
  const Weight* w;         // [N_i, K]
  ActQuant act_quant = ActQuant::kNone;
  TensorView y;            // [M, N_i]
};

struct LinearsParams {
  ConstTensorView x;       // [M, K]
  std::span<const LinearOut> outs;
};

// The grouped output projection: y[t, g, :] = w[g] @ x[t, g, :], w viewed as [G, R, K].
struct GroupedLinearParams {
  ConstTensorView x;       // [T, G, K]
  const Weight* w;         // [G*R, K]
  TensorView y;            // [T, G, R]
};

// ---- mHC (MODEL.md §2.4-2.6) ----------------------------------------------------------------

struct HcPreParams {
  ConstTensorView x;       // [T, n, D] residual streams
  const Weight* fn;        // [(2+n)*n, n*D] f32
  const Weight* scale;     // [3] f32
  const Weight* base;      // [(2+n)*n] f32
  int64_t sinkhorn_iters = 0;
  float hc_eps = 0;
  float norm_eps = 0;
  TensorView y;            // [T, D]   sum_j pre[j] * x[:, j]
  TensorView post;         // [T, n] f32
  TensorView comb;         // [T, n, n] f32, Sinkhorn-normalised, comb[t, i, k] row-major
  // Set: y is then rms_norm(y) with this weight [D] and norm_eps, the bits Ops::rms_norm gives
  // (the sub-layer's input norm in the same op, one launch on the GPU).
  const Weight* y_norm = nullptr;
};

struct HcPostParams {
  ConstTensorView a;       // [T, D] sub-layer output
  ConstTensorView x;       // [T, n, D] residual streams
  ConstTensorView post;    // [T, n] f32
  ConstTensorView comb;    // [T, n, n] f32
  TensorView out;          // [T, n, D]: post[j] * a + sum_i comb[i, j] * x[:, i]
};

struct HcHeadParams {
  ConstTensorView x;       // [T, n, D]
  const Weight* fn;        // [n, n*D] f32
  const Weight* scale;     // [1] f32
  const Weight* base;      // [n] f32
  float hc_eps = 0;
  float norm_eps = 0;
  TensorView y;            // [T, D]
};

// ---- attention ------------------------------------------------------------------------------

// One sequence's part of a batch: tokens [token_begin, token_begin + num_tokens) of the batch sit
// at positions start_pos, start_pos + 1, ...
struct SeqSlice {
  int64_t token_begin = 0;
  int64_t num_tokens = 0;
  int64_t start_pos = 0;
};

// The compressor's gated pooling (MODEL.md §4.2-4.3) for one sequence. The state rings hold the
// last ring_rows = coff*m tokens' (kv, score + ape) in fp32, the token at position p in row
// p % ring_rows. The op writes this slice's rows and pools every block the slice completes.
// A slice of n tokens owns compressor_block_rows(n, m) = ceil(n / m) rows of `out` from
// out_begin, the most blocks n tokens can complete: row i is block floor(start_pos / m) + i,
// pooled if the slice completes it and zeros otherwise. The row count does not depend on the
// position, so a decode step's shapes are the same at every step (what a CUDA graph needs).
struct CompressorSeq {
  SeqSlice slice;
  TensorView state_kv;     // [coff*m, coff*dc] f32
  TensorView state_score;  // [coff*m, coff*dc] f32
  int64_t out_begin = 0;   // row of `out` for the slice's first block row
};

inline int64_t compressor_block_rows(int64_t num_tokens, int64_t ratio) { return (num_tokens + ratio - 1) / ratio; }

struct CompressorPoolParams {
  ConstTensorView kv;      // [T, coff*dc] f32  x @ wkv^T
  ConstTensorView score;   // [T, coff*dc] f32  x @ wgate^T (ape not yet added)
  const Weight* ape;       // [m, coff*dc] f32
  int64_t ratio = 0;       // m: 4 (overlapping, coff = 2) or 128 (coff = 1)
  ConstTensorView positions;  // [T] i32 each token's position (the slices' positions)
  std::span<const CompressorSeq> seqs;
  TensorView out;          // [rows, dc] f32 each sequence's block rows (see CompressorSeq)
};

struct IndexerSeq {
  SeqSlice slice;
  PagedCache keys;         // pool [pages, page_rows, dh]: entry j is key j; entries complete at a
                           // query's position are valid
};

// Lightning indexer (MODEL.md §5.2): I[t, j] = sum_h w[t, h] * weight_scale * relu(q[t, h] . k[j])
// over the entries j < floor((p_t + 1) / ratio); picks the top `topk` (ties: lower j first). An
// absent key (PagedCache) scores -inf. The table must reach every entry the slice's tokens see.
struct IndexerTopkParams {
  ConstTensorView q;       // [T, Hi, dh]
  ConstTensorView weights; // [T, Hi]
  float weight_scale = 0;
  int64_t ratio = 0;
  ConstTensorView positions;  // [T] i32 each token's position (the slices' positions)
  std::span<const IndexerSeq> seqs;
  TensorView topk;         // [T, topk] i32: chosen entry ids ascending, then -1
};

struct AttentionSeq {
  SeqSlice slice;
  ConstTensorView window;      // [W, d] kv rows of positions < start_pos, position p in row p % W
  PagedCache compressed;       // pool [pages, page_rows, d]: entry j is compressed entry j; empty
                               // for SWA-only layers
};

// Sparse attention with a per-head sink (MODEL.md §3.5-3.6). Query t at position p attends to
// the window positions max(0, p-W+1)..p (older ones from the sequence's window ring, the batch's
// own from kv), then to compressed entries: none (ratio 0), all j < floor((p+1)/ratio) (topk
// empty), or the listed ids (topk given). Entries are visited in that order; absent compressed
// entries (PagedCache) are skipped. The table must reach every entry the slice's tokens see.
struct SparseAttentionParams {
  ConstTensorView q;           // [T, H, d]
  ConstTensorView kv;          // [T, d] the batch's window kv rows
  const Weight* sink;          // [H] f32
  ConstTensorView topk;        // [T, k] i32 ascending ids then -1, or empty
  ConstTensorView positions;   // [T] i32 each token's position (the slices' positions)
  std::span<const AttentionSeq> seqs;
  int64_t window = 0;
  int64_t ratio = 0;
  float softmax_scale = 0;
  TensorView out;              // [T, H, d]
};

// ---- MoE (MODEL.md §6) ----------------------------------------------------------------------

// Scores s = score_func(logits); experts = tid2eid[id] (hash layers) or top-k of s + bias;
// weights = s at those experts, normalised to sum 1 (non-softmax scoring), times route_scale.
struct MoeRouteParams {
  ConstTensorView logits;      // [T, E] f32
  const Weight* bias;          // [E] f32, score-routed layers; nullptr for hash layers
  const Weight* tid2eid;       // [V, k] i32, hash layers; nullptr otherwise
  ConstTensorView token_ids;   // [T] i32, hash layers
  ScoringFunc scoring = ScoringFunc::kSqrtSoftplus;
  float route_scale = 1;
  TensorView experts;          // [T, k] i32, ascending
  TensorView weights;          // [T, k] f32, in the order of experts
};

// h = silu(min(gate, limit)) * clamp(up, -limit, limit) * row_weight (limit 0: no clamp)
struct SwigluParams {
  ConstTensorView gate;        // [T, I]
  ConstTensorView up;          // [T, I]
  ConstTensorView row_weight;  // [T] f32, or empty for 1
  float limit = 0;
  TensorView out;              // [T, I]
};

struct ExpertWeights {
  const Weight* w1;            // [I, D] gate
  const Weight* w2;            // [D, I] down
  const Weight* w3;            // [I, D] up
};

// The routing moe_experts does first when it is given one (docs/MODEL.md §6.2): logits = x gate^T
// in f32 through linear(), then moe_route() into the op's experts and weights (Ops::moe_gate_route).
struct MoeGate {
  const Weight* weight = nullptr;   // [E, D]
  ActQuant act_quant = ActQuant::kNone;
  const Weight* bias = nullptr;     // as MoeRouteParams
  const Weight* tid2eid = nullptr;
  ConstTensorView token_ids;
  ScoringFunc scoring = ScoringFunc::kSqrtSoftplus;
  float route_scale = 1;
};

// out[t] = sum over t's experts e (ascending) of w2_e(swiglu(w1_e x, w3_e x) * weight) in fp32,
// plus the shared expert's s[t], rounded to out's dtype. Each routed expert's linears quantise
// like LinearParams with act_quant. s = w2(swiglu(w1 x, w3 x)) is what Ops::moe_shared_expert
// computes (linears(), swiglu() and linear(), each rounded to x's dtype), so a backend may run it
// beside the routed experts (on another stream) or among them, with the same bits; with a gate,
// beside the routing too (it reads only x).
struct MoeExpertsParams {
  ConstTensorView x;           // [T, D]
  TensorView experts;          // [T, k] i32: read, or written first by the gate's routing
  TensorView weights;          // [T, k] f32: likewise
  std::span<const ExpertWeights> routed;  // [E]
  const ExpertWeights* shared = nullptr;  // the shared expert (w1, w3 [I_s, D], w2 [D, I_s]), or none
  float swiglu_limit = 0;
  ActQuant act_quant = ActQuant::kNone;         // the routed experts' linears
  ActQuant shared_act_quant = ActQuant::kNone;  // the shared expert's linears
  TensorView out;              // [T, D]
  const MoeGate* gate = nullptr;  // routing the op does first, or none (experts and weights given)
};

// moe_experts in two halves, for expert parallelism (docs/ARCHITECTURE.md "Several devices"):
// the routed experts' work as rows that can travel to the rank holding their expert, and the
// per-token sum of the rows that come back. moe_experts == moe_expert_rows over every (token,
// slot) then moe_combine, bit for bit, whichever rows a call gets and however the experts are
// split over ranks (tests/unit/test_cpu_moe_halves).
//
// Row r: x[r] through expert experts[r] (an index into `routed`, which may be one rank's share
// of the experts), its swiglu scaled by weights[r]: out[r] = w2_e(swiglu(w1_e x, w3_e x) * w),
// each linear quantising like LinearParams with act_quant, rounded to out's dtype (x's): the
// slot's term of moe_experts' sum, whatever rows travel with it.
struct MoeExpertRowsParams {
  ConstTensorView x;           // [R, D]
  ConstTensorView experts;     // [R] i32, indices into routed
  ConstTensorView weights;     // [R] f32
  std::span<const ExpertWeights> routed;
  float swiglu_limit = 0;
  ActQuant act_quant = ActQuant::kNone;
  TensorView out;              // [R, D] x's dtype
};

// out[t] = (rows[t k] + rows[t k + 1] + ... + rows[t k + k - 1]) + shared[t], summed in fp32 in
// that order, rounded to out's dtype: moe_experts' sum over a token's slots and shared expert.
struct MoeCombineParams {
  ConstTensorView rows;        // [T k, D] the slots' terms, token-major
  int64_t k = 0;               // slots per token
  ConstTensorView shared;      // [T, D] the shared expert's output, or empty
  TensorView out;              // [T, D]
};

// ---- the interface ----------------------------------------------------------------------------

class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::string_view name() const = 0;
  // Waits until all work queued so far is done (synchronous backends return at once).
  virtual void synchronize() {}
  // Makes the calling thread one that may use this backend: a backend bound to one of several
  // devices makes its device the thread's current one. A thread other than the one that made
  // the backend calls it before its first op (an engine's rank threads do).
  virtual void bind_thread() {}

  // The device's memory once the work queued so far is done, memory the backend keeps pooled for
  // reuse counted as free; each call starts the period the next call's peak_backend_bytes covers.
  // nullopt where the backend's memory is the host's (the CPU backend). Not while a CUDA graph is
  // being captured.
  virtual std::optional<DeviceMemory> device_memory() { return std::nullopt; }
  // Whether the cache ops (write_cache_rows, indexer_topk, sparse_attention, copy) take the
  // packed caches of kv/packed_entries.h (cache dtype kF8E4M3) as well as float rows.
  virtual bool reads_packed_caches() const { return false; }

  // Zero-filled backend memory.
  virtual DeviceTensor alloc(DType dtype, Shape shape) = 0;
  // Backend memory for the output of an op that writes every element of it: contents unspecified
  // (the default is alloc's zeros; a backend may skip the fill, which at decode is a launch per
  // tensor).
  virtual DeviceTensor alloc_output(DType dtype, Shape shape) { return alloc(dtype, std::move(shape)); }
  // Host <-> backend transfers of equal shapes and dtypes. upload returns once the host buffer may
  // be reused (the copy itself may still be queued), download once the host buffer holds the data.
  virtual void upload(ConstTensorView host, TensorView dst) = 0;
  virtual void download(ConstTensorView src, TensorView host) = 0;
  virtual void copy(const CopyParams& p) = 0;
  // The default runs each range through copy(); a backend overrides it to batch them.
  virtual void copy_rows(const CopyRowsParams& p);
  virtual void write_cache_rows(const WriteCacheRowsParams& p) = 0;
  virtual void edit_logits(const EditLogitsParams& p) = 0;
  virtual void mask_logits(const MaskLogitsParams& p) = 0;
  virtual void row_logprobs(const RowLogprobsParams& p) = 0;
  virtual void sample_rows(const SampleRowsParams& p) = 0;
  // Converts a checkpoint tensor to the backend's compute layout; checks shapes and dtypes.
  virtual Weight load_weight(const LoadWeightParams& p) = 0;
  virtual Weight dummy_weight(const DummyWeightParams& p) = 0;

  virtual void embed(const EmbedParams& p) = 0;
  virtual void rms_norm(const RmsNormParams& p) = 0;
  virtual void rope(const RopeParams& p) = 0;
  virtual void quant_sim(const QuantSimParams& p) = 0;
  virtual void hadamard(const HadamardParams& p) = 0;
  // The ops NormRopeQuantParams names, in order, on this backend's own ops; a backend may fuse them.
  virtual void norm_rope_quant(const NormRopeQuantParams& p);
  virtual void add_broadcast(const AddBroadcastParams& p) = 0;

  virtual void linear(const LinearParams& p) = 0;
  virtual void linears(const LinearsParams& p) {
    for (const LinearOut& o : p.outs) linear({p.x, o.w, o.act_quant, o.y});
  }
  virtual void grouped_linear(const GroupedLinearParams& p) = 0;

  virtual void hc_pre(const HcPreParams& p) = 0;
  virtual void hc_post(const HcPostParams& p) = 0;
  virtual void hc_head(const HcHeadParams& p) = 0;

  virtual void compressor_pool(const CompressorPoolParams& p) = 0;
  virtual void indexer_topk(const IndexerTopkParams& p) = 0;
  virtual void sparse_attention(const SparseAttentionParams& p) = 0;

  virtual void moe_route(const MoeRouteParams& p) = 0;
  virtual void swiglu(const SwigluParams& p) = 0;
  virtual void moe_experts(const MoeExpertsParams& p) = 0;
  // The halves of moe_experts for expert parallelism; a backend without them refuses (UsageError
  // naming it).
  virtual void moe_expert_rows(const MoeExpertRowsParams& p);
  virtual void moe_combine(const MoeCombineParams& p);
  // The shared expert's output of p (MoeExpertsParams), [T, D] in x's dtype, through this
  // backend's linears(), swiglu() and linear(): what moe_experts adds for it.
  DeviceTensor moe_shared_expert(const MoeExpertsParams& p);
  // p.gate's routing (none without a gate), through this backend's linear() and moe_route(): what
  // moe_experts does before its routed experts.
  void moe_gate_route(const MoeExpertsParams& p);

  // Runs the tasks of one fork/join (ops/fork_join.h). The default is the sequential contract
  // (run_in_order); a backend with several streams overrides it to overlap the side tasks.
  virtual void fork_join(const ForkJoinTasks& tasks) { run_in_order(tasks); }
};

}  // namespace dsv4
