// CpuOps mHC (MODEL.md §2.4-2.6): the pre mix with Sinkhorn normalisation, the post mix, and the
// head's stream weighting; all in fp32.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/float_io.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/parallel_rows.h"
#include "ops/param_checks.h"

namespace dsv4::cpu {

namespace {

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// mixes[t, :] = (x[t] @ fn^T) * rsqrt(mean(x[t]^2) + eps), x[t] the n*D streams flattened.
std::vector<float> stream_mixes(ThreadPool& pool, const std::vector<float>& x, int64_t T, int64_t width,
                                const float* fn, int64_t mix, float norm_eps) {
  std::vector<float> mixes(static_cast<size_t>(T * mix));
  gemm_xwt(pool, x.data(), width, T, width, fn, mix, mixes.data(), mix);
  for (int64_t t = 0; t < T; ++t) {
    const float mean = sum_squares(x.data() + t * width, width) / static_cast<float>(width);
    const float rs = 1.0f / std::sqrt(mean + norm_eps);
    for (int64_t k = 0; k < mix; ++k) mixes[t * mix + k] *= rs;
  }
  return mixes;
}

// The n x n Sinkhorn of MODEL.md §2.4: a row softmax plus eps, then a column normalisation,
// then (iters - 1) rounds of row and column normalisation.
void sinkhorn(float* c, int64_t n, int64_t iters, float eps) {
  for (int64_t i = 0; i < n; ++i) {
    float* row = c + i * n;
    float mx = row[0];
    for (int64_t k = 1; k < n; ++k) mx = std::fmax(mx, row[k]);
    float sum = 0;
    for (int64_t k = 0; k < n; ++k) sum += (row[k] = std::exp(row[k] - mx));
    for (int64_t k = 0; k < n; ++k) row[k] = row[k] / sum + eps;
  }
  auto normalise_columns = [&] {
    for (int64_t k = 0; k < n; ++k) {
      float sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += c[i * n + k];
      for (int64_t i = 0; i < n; ++i) c[i * n + k] /= (sum + eps);
    }
  };
  normalise_columns();
  for (int64_t it = 1; it < iters; ++it) {
    for (int64_t i = 0; i < n; ++i) {
      float sum = 0;
      for (int64_t k = 0; k < n; ++k) sum += c[i * n + k];
      for (int64_t k = 0; k < n; ++k) c[i * n + k] /= (sum + eps);
    }
    normalise_columns();
  }
}

// y[t] = sum_j g[t, j] * x[t, j, :] in fp32, j ascending.
void weighted_stream_sum(ThreadPool& pool, const std::vector<float>& x, const std::vector<float>& g, int64_t T,
                         int64_t n, int64_t D, TensorView y) {
  parallel_rows(pool, T, 8, [&](int64_t t0, int64_t t1) {
    std::vector<float> acc(static_cast<size_t>(D));
    for (int64_t t = t0; t < t1; ++t) {
      const float* xt = x.data() + t * n * D;
      for (int64_t d = 0; d < D; ++d) acc[d] = g[t * n] * xt[d];
      for (int64_t j = 1; j < n; ++j)
        for (int64_t d = 0; d < D; ++d) acc[d] += g[t * n + j] * xt[j * D + d];
      store_floats(y, t * D, D, acc.data());
    }
  });
}

}  // namespace

void CpuOps::hc_pre(const HcPreParams& p) {
  check_params(p);
  const int64_t T = p.x.dim(0), n = p.x.dim(1), D = p.x.dim(2), mix = (2 + n) * n;
  const float* fn = weight_f32("hc_pre", p.fn, {mix, n * D});
  const float* scale = weight_f32("hc_pre", p.scale, {3});
  const float* base = weight_f32("hc_pre", p.base, {mix});
  expect_shape("hc_pre", "y", p.y, {T, D});
  expect_shape("hc_pre", "post", p.post, {T, n});
  expect_dtype("hc_pre", "post", p.post, DType::kF32);
  expect_shape("hc_pre", "comb", p.comb, {T, n, n});
  expect_dtype("hc_pre", "comb", p.comb, DType::kF32);

  const std::vector<float> x = load_all(p.x);
  const std::vector<float> mixes = stream_mixes(pool_, x, T, n * D, fn, mix, p.norm_eps);
  std::vector<float> pre(static_cast<size_t>(T * n));
  float* post = p.post.data<float>();
  float* comb = p.comb.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    const float* m = mixes.data() + t * mix;
    for (int64_t j = 0; j < n; ++j) {
      pre[t * n + j] = sigmoid(m[j] * scale[0] + base[j]) + p.hc_eps;
      post[t * n + j] = 2.0f * sigmoid(m[n + j] * scale[1] + base[n + j]);
    }
    float* c = comb + t * n * n;
    for (int64_t k = 0; k < n * n; ++k) c[k] = m[2 * n + k] * scale[2] + base[2 * n + k];
    sinkhorn(c, n, p.sinkhorn_iters, p.hc_eps);
  }
  weighted_stream_sum(pool_, x, pre, T, n, D, p.y);
  if (p.y_norm != nullptr) rms_norm({p.y, p.y_norm, p.norm_eps, p.y});
}

void CpuOps::hc_post(const HcPostParams& p) {
  check_params(p);
  const int64_t T = p.x.dim(0), n = p.x.dim(1), D = p.x.dim(2);
  const float* post = p.post.data<float>();
  const float* comb = p.comb.data<float>();
  parallel_rows(pool_, T, 8, [&](int64_t t0, int64_t t1) {
    std::vector<float> a(static_cast<size_t>(D)), x(static_cast<size_t>(n * D)), out(static_cast<size_t>(n * D));
    for (int64_t t = t0; t < t1; ++t) {
      load_floats(p.a, t * D, D, a.data());
      load_floats(p.x, t * n * D, n * D, x.data());
      const float* c = comb + t * n * n;
      for (int64_t j = 0; j < n; ++j) {
        float* o = out.data() + j * D;
        for (int64_t d = 0; d < D; ++d) o[d] = c[j] * x[d];  // i = 0: comb[0, j]
        for (int64_t i = 1; i < n; ++i)
          for (int64_t d = 0; d < D; ++d) o[d] += c[i * n + j] * x[i * D + d];
        for (int64_t d = 0; d < D; ++d) o[d] = post[t * n + j] * a[d] + o[d];
      }
      store_floats(p.out, t * n * D, n * D, out.data());
    }
  });
}

void CpuOps::hc_head(const HcHeadParams& p) {
  check_params(p);
  const int64_t T = p.x.dim(0), n = p.x.dim(1), D = p.x.dim(2);
  const float* fn = weight_f32("hc_head", p.fn, {n, n * D});
  const float* scale = weight_f32("hc_head", p.scale, {1});
  const float* base = weight_f32("hc_head", p.base, {n});
  expect_shape("hc_head", "y", p.y, {T, D});
  const std::vector<float> x = load_all(p.x);
  std::vector<float> g = stream_mixes(pool_, x, T, n * D, fn, n, p.norm_eps);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j) g[t * n + j] = sigmoid(g[t * n + j] * scale[0] + base[j]) + p.hc_eps;
  weighted_stream_sum(pool_, x, g, T, n, D, p.y);
}

}  // namespace dsv4::cpu
