// CpuOps: memory, weight loading and the elementwise ops (embedding, RMSNorm, RoPE,
// quantisation-aware rounding, Hadamard, broadcast add).
#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <thread>

#include "backend/cpu/fast_quant.h"
#include "backend/cpu/float_io.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/parallel_rows.h"
#include "core/dummy_random.h"
#include "kv/packed_entries.h"
#include "ops/param_checks.h"
#include "sampling/logit_edit.h"
#include "sampling/token_draw.h"

namespace dsv4::cpu {

namespace {

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

void check_same_bytes(const char* op, ConstTensorView a, ConstTensorView b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    throw UsageError(std::string(op) + ": " + std::string(dtype_name(a.dtype())) + shape_str(a.shape()) +
                     " does not match " + std::string(dtype_name(b.dtype())) + shape_str(b.shape()));
}

}  // namespace

CpuOps::CpuOps(int threads) : pool_(resolve_threads(threads)) { configure_blas_threads(); }

DeviceTensor CpuOps::alloc(DType dtype, Shape shape) {
  for (int64_t d : shape)
    if (d < 0) throw UsageError("alloc: shape " + shape_str(shape) + " has a negative dimension");
  constexpr size_t kAlign = 64;
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  const size_t padded = std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kAlign, padded));
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, padded);
  return DeviceTensor(std::shared_ptr<std::byte>(p, [](std::byte* q) { std::free(q); }), dtype, std::move(shape));
}

void CpuOps::upload(ConstTensorView host, TensorView dst) {
  check_same_bytes("upload", host, dst);
  std::memcpy(dst.bytes(), host.bytes(), host.nbytes());
}

void CpuOps::download(ConstTensorView src, TensorView host) {
  check_same_bytes("download", src, host);
  std::memcpy(host.bytes(), src.bytes(), src.nbytes());
}

void CpuOps::copy(const CopyParams& p) {
  check_params(p);
  if (p.src.dtype() == p.dst.dtype()) {
    std::memmove(p.dst.bytes(), p.src.bytes(), p.src.nbytes());
    return;
  }
  std::vector<float> buf = load_all(p.src);
  store_floats(p.dst, 0, p.dst.numel(), buf.data());
}

void CpuOps::write_cache_rows(const WriteCacheRowsParams& p) {
  check_params(p);
  const int64_t width = p.src.dim(1);
  const size_t row_bytes = static_cast<size_t>(width) * dtype_size(p.src.dtype());
  std::vector<float> row_values(static_cast<size_t>(width));
  const std::span<const int32_t> dst = p.dst_rows.span<int32_t>();
  for (size_t s = 0; s < p.seqs.size(); ++s) {
    const CacheRows& c = p.seqs[s];
    const PageTable table = page_table(c.cache);
    for (int64_t r = c.src_begin; r < c.src_begin + c.rows; ++r) {
      const int32_t entry = dst[static_cast<size_t>(r)];
      if (entry < 0) continue;
      const int64_t row = pool_row(table, entry);
      if (row < 0)
        throw UsageError("write_cache_rows: source row " + std::to_string(r) + " goes to entry " + std::to_string(entry) +
                         " of sequence " + std::to_string(s) + "'s cache, which has no row for it (a table of " +
                         std::to_string(table.size) + " pages of " + std::to_string(table.page_rows) +
                         " rows into a pool of " + std::to_string(table.num_pages) + ")");
      auto* pool = reinterpret_cast<uint8_t*>(c.cache.pool.bytes());
      switch (packed_entry(c.cache.pool.dtype(), c.cache.pool.dim(2))) {
        case PackedEntry::kFp8Attention:
          load_floats(p.src, r * width, width, row_values.data());
          encode_fp8_entry(row_values.data(), Fp8CacheLayout{static_cast<int>(table.page_rows)}, row, pool);
          break;
        case PackedEntry::kMxfp4Key:
          load_floats(p.src, r * width, width, row_values.data());
          encode_mxfp4_key(row_values.data(), Mxfp4KeyLayout{static_cast<int>(table.page_rows)}, row, pool);
          break;
        case PackedEntry::kNone:
          std::memcpy(c.cache.pool.bytes() + row * row_bytes, p.src.bytes() + r * row_bytes, row_bytes);
          break;
      }
    }
  }
}

void CpuOps::edit_logits(const EditLogitsParams& p) {
  check_params(p);
  const auto* edits = reinterpret_cast<const LogitEdit*>(p.edits.data<int32_t>());
  const int64_t count = p.edits.dim(0);
  for (int64_t i = 0; i < count; ++i)
    if (edits[i].row < 0 || edits[i].row >= p.x.dim(0) || edits[i].id < 0 || edits[i].id >= p.x.dim(1))
      throw UsageError("edit_logits: edit " + std::to_string(i) + " names row " + std::to_string(edits[i].row) +
                       ", token " + std::to_string(edits[i].id) + " of logits " + shape_str(p.x.shape()));
  apply_logit_edits(p.x.data<float>(), p.x.dim(1), edits, count);
}

void CpuOps::mask_logits(const MaskLogitsParams& p) {
  check_params(p);
  const int64_t R = p.x.dim(0), V = p.x.dim(1), W = p.allowed.dim(1);
  std::vector<bool> masked(static_cast<size_t>(R), false);
  for (int64_t m = 0; m < p.rows.dim(0); ++m) {
    const int32_t row = p.rows.data<int32_t>()[m];
    if (row < 0 || row >= R || masked[static_cast<size_t>(row)])
      throw UsageError("mask_logits: mask " + std::to_string(m) + " names row " + std::to_string(row) + " of " +
                       std::to_string(R) + (row >= 0 && row < R ? ", masked already" : ""));
    masked[static_cast<size_t>(row)] = true;
    const auto* words = reinterpret_cast<const uint32_t*>(p.allowed.data<int32_t>() + m * W);
    float* x = p.x.data<float>() + row * V;
    for (int64_t j = 0; j < V; ++j)
      if (((words[j / 32] >> (j % 32)) & 1u) == 0) x[j] = -std::numeric_limits<float>::infinity();
  }
}

void CpuOps::row_logprobs(const RowLogprobsParams& p) {
  check_params(p);
  const int64_t R = p.x.dim(0), V = p.x.dim(1), N = p.top_ids.dim(1);
  for (int64_t r = 0; r < R; ++r) {
    const int32_t id = p.ids.data<int32_t>()[r], count = p.top_counts.data<int32_t>()[r];
    if (count < 0 || count > N)
      throw UsageError("row_logprobs: row " + std::to_string(r) + " asks for " + std::to_string(count) +
                       " top logprobs, outside [0, " + std::to_string(N) + "]");
    RowLogprobs row;
    row.logprob = draw_nan();
    if (id >= 0 && id < V) row = draw_row_logprobs(p.x.data<float>() + r * V, V, id, count);
    p.logprob.data<float>()[r] = row.logprob;
    p.rank.data<int32_t>()[r] = row.rank;
    for (int64_t j = 0; j < N; ++j) {
      const bool filled = j < static_cast<int64_t>(row.top_ids.size());
      p.top_ids.data<int32_t>()[r * N + j] = filled ? row.top_ids[static_cast<size_t>(j)] : -1;
      p.top_logprobs.data<float>()[r * N + j] =
          filled ? row.top_logprobs[static_cast<size_t>(j)] : draw_nan();
    }
  }
}

void CpuOps::sample_rows(const SampleRowsParams& p) {
  check_params(p);
  const int64_t R = p.x.dim(0), V = p.x.dim(1);
  const auto* rows = reinterpret_cast<const DrawRow*>(p.rows.data<int64_t>());
  int32_t* out = p.out.data<int32_t>();
  for (int64_t r = 0; r < R; ++r)
    out[r] = draw_token(p.x.data<float>() + r * V, V, rows[r]);
}

Weight CpuOps::load_weight(const LoadWeightParams& p) {
  Weight w;
  w.name = p.name;
  w.format = p.format;
  const ConstTensorView& src = p.weight;
  switch (p.format) {
    case WeightFormat::kFp8: {
      w.shape = src.shape();
      w.data = alloc(DType::kF32, w.shape);
      dequant_fp8_block(src, p.scale, w.data.view().span<float>(), p.name);
      break;
    }
    case WeightFormat::kMxfp4: {
      if (src.rank() != 2) throw TensorError(p.name + ": an MXFP4 weight must be 2-D, got " + shape_str(src.shape()));
      w.shape = {src.dim(0), src.dim(1) * 2};
      w.data = alloc(DType::kF32, w.shape);
      dequant_mxfp4(src, p.scale, w.data.view().span<float>(), p.name);
      break;
    }
    case WeightFormat::kPlain: {
      w.shape = src.shape();
      const int64_t n = src.numel();
      switch (src.dtype()) {
        case DType::kF32:
        case DType::kBF16: {
          w.data = alloc(DType::kF32, w.shape);
          load_floats(src, 0, n, w.data.view().data<float>());
          break;
        }
        case DType::kI32:
        case DType::kI64: {
          w.data = alloc(DType::kI32, w.shape);
          int32_t* out = w.data.view().data<int32_t>();
          for (int64_t i = 0; i < n; ++i) {
            const int64_t v = src.dtype() == DType::kI32 ? src.data<int32_t>()[i] : src.data<int64_t>()[i];
            if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
              throw TensorError(p.name + ": element " + std::to_string(i) + " = " + std::to_string(v) +
                                " does not fit in int32");
            out[i] = static_cast<int32_t>(v);
          }
          break;
        }
        default:
          throw TensorError(p.name + ": the CPU backend cannot use a plain " + std::string(dtype_name(src.dtype())) +
                            " tensor");
      }
      break;
    }
  }
  return w;
}

// The exact values of the dummy weight (the CPU keeps every weight as fp32 values).
Weight CpuOps::dummy_weight(const DummyWeightParams& p) {
  check_params(p);
  Weight w;
  w.name = p.name;
  w.format = p.format;
  w.shape = p.shape;
  w.data = alloc(DType::kF32, w.shape);
  float* out = w.data.view().data<float>();
  const auto n = static_cast<uint64_t>(w.data.numel());
  if (p.format == WeightFormat::kPlain) {
    const bool bf16 = p.dtype == DType::kBF16;
    for (uint64_t i = 0; i < n; ++i) {
      const float v = p.mean + p.std * dummy_normal(p.key, i);
      out[i] = bf16 ? round_bf16(v) : v;
    }
  } else {
    const int e = dummy_fp8_scale_exponent(p.mean, p.std);
    const float inv_scale = std::ldexp(1.0f, -e), scale = std::ldexp(1.0f, e);
    for (uint64_t i = 0; i < n; ++i) out[i] = e4m3_to_float(dummy_e4m3_code(p.key, i, p.mean, p.std, inv_scale)) * scale;
  }
  return w;
}

void CpuOps::embed(const EmbedParams& p) {
  check_params(p);
  const int64_t T = p.ids.dim(0), n = p.out.dim(1), D = p.out.dim(2);
  expect_shape("embed", "out", p.out, {T, n, D});
  if (p.table == nullptr || p.table->shape.size() != 2 || p.table->shape[1] != D)
    throw UsageError("embed: the table must be [vocab, " + std::to_string(D) + "]");
  const int64_t V = p.table->shape[0];
  const float* table = p.table->data.view().data<float>();
  const int32_t* ids = p.ids.data<int32_t>();
  for (int64_t t = 0; t < T; ++t) {
    if (ids[t] < 0 || ids[t] >= V)
      throw UsageError("embed: token id " + std::to_string(ids[t]) + " at index " + std::to_string(t) +
                       " is outside the vocabulary [0, " + std::to_string(V) + ")");
    for (int64_t j = 0; j < n; ++j) store_floats(p.out, (t * n + j) * D, D, table + ids[t] * D);
  }
}

void CpuOps::rms_norm(const RmsNormParams& p) {
  check_params(p);
  const int64_t rows = p.x.dim(0), dim = p.x.dim(1);
  const float* w = p.weight ? weight_f32("rms_norm", p.weight, {dim}) : nullptr;
  parallel_rows(pool_, rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> v(static_cast<size_t>(dim));
    for (int64_t r = r0; r < r1; ++r) {
      load_floats(p.x, r * dim, dim, v.data());
      const float mean = sum_squares(v.data(), dim) / static_cast<float>(dim);
      const float inv = 1.0f / std::sqrt(mean + p.eps);
      for (int64_t i = 0; i < dim; ++i) v[i] = w ? w[i] * (v[i] * inv) : v[i] * inv;
      store_floats(p.y, r * dim, dim, v.data());
    }
  });
}

void CpuOps::rope(const RopeParams& p) {
  check_params(p);
  const int64_t rows = p.x.dim(0), heads = p.x.dim(1), hd = p.x.dim(2), half = p.rope_dim / 2;
  const float* inv_freq = p.inv_freq.data<float>();
  const int32_t* pos = p.positions.data<int32_t>();
  parallel_rows(pool_, rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    std::vector<float> v(static_cast<size_t>(p.rope_dim));
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t i = 0; i < half; ++i) {
        // The angle is a float32 product, as in precompute_freqs_cis (torch.outer in fp32).
        const float angle = static_cast<float>(pos[r]) * inv_freq[i];
        cs[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
        sn[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
        if (p.inverse) sn[i] = -sn[i];
      }
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t off = (r * heads + h) * hd + hd - p.rope_dim;
        load_floats(p.x, off, p.rope_dim, v.data());
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * cs[i] - b * sn[i];
          v[2 * i + 1] = a * sn[i] + b * cs[i];
        }
        store_floats(p.x, off, p.rope_dim, v.data());
      }
    }
  });
}

void CpuOps::quant_sim(const QuantSimParams& p) {
  check_params(p);
  const int64_t rows = p.x.dim(0), width = p.x.dim(1);
  parallel_rows(pool_, rows, 32, [&](int64_t r0, int64_t r1) {
    std::vector<float> v(static_cast<size_t>(p.cols));
    for (int64_t r = r0; r < r1; ++r) {
      load_floats(p.x, r * width, p.cols, v.data());
      for (int64_t b = 0; b < p.cols; b += p.block) {
        if (p.format == QuantFormat::kE4M3) fake_quant_e4m3(v.data() + b, p.block);
        else fake_quant_e2m1(v.data() + b, p.block);
      }
      store_floats(p.x, r * width, p.cols, v.data());
    }
  });
}

void CpuOps::hadamard(const HadamardParams& p) {
  check_params(p);
  const int64_t rows = p.x.dim(0), n = p.x.dim(1);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  parallel_rows(pool_, rows, 32, [&](int64_t r0, int64_t r1) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t r = r0; r < r1; ++r) {
      load_floats(p.x, r * n, n, v.data());
      // In-place fast Walsh-Hadamard transform; its butterflies produce the Sylvester order.
      for (int64_t h = 1; h < n; h *= 2)
        for (int64_t i = 0; i < n; i += 2 * h)
          for (int64_t j = i; j < i + h; ++j) {
            const float a = v[j], b = v[j + h];
            v[j] = a + b;
            v[j + h] = a - b;
          }
      for (float& e : v) e *= scale;
      store_floats(p.x, r * n, n, v.data());
    }
  });
}

void CpuOps::add_broadcast(const AddBroadcastParams& p) {
  check_params(p);
  const int64_t T = p.a.dim(0), n = p.a.dim(1), D = p.a.dim(2);
  parallel_rows(pool_, T, 16, [&](int64_t t0, int64_t t1) {
    std::vector<float> a(static_cast<size_t>(D)), b(static_cast<size_t>(D));
    for (int64_t t = t0; t < t1; ++t) {
      load_floats(p.b, t * D, D, b.data());
      for (int64_t j = 0; j < n; ++j) {
        load_floats(p.a, (t * n + j) * D, D, a.data());
        for (int64_t i = 0; i < D; ++i) a[i] += b[i];
        store_floats(p.out, (t * n + j) * D, D, a.data());
      }
    }
  });
}

}  // namespace dsv4::cpu
