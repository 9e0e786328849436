// CudaOps linears. FP8 weights with FP8 activation quantisation (the default mode's FP8/FP4
// linears) take kernels::act_quant_fp8 and then the GEMM CudaOptions::fp8_gemm names: by default
// kernels::fp8_mma_gemm (fp16 tensor cores, fp32 sums; dense prefill-sized calls on its f16 WGMMA
// kernel over operands converted to fp16 first; with kWgmma its FP8 tensor-core kernels at prefill
// sizes, the dense ones TMA-fed over the codes as they are), or cuBLASLt's block-scaled FP8 GEMM.
// bf16 weights with bf16 activations (the compressors, the indexer's weights_proj, the MoE gate,
// the head) take kernels::bf16_mma_gemm (bf16 tensor cores, fp32 sums) unless fp8_gemm is kSimple,
// which keeps every linear in the CPU's arithmetic. Everything else takes kernels::simple_gemm,
// whose fp32 result has the CPU's semantics up to the summation order: fp32 weights, and FP8
// weights in exact-math mode (ActQuant::kNone: the e4m3 codes times their pow2 scales, dequantised
// exactly on the fly, so no fp32 copy of the weight is kept). The grouped wo_a with bf16
// activations and FP8 weights takes kernels::grouped_bf16_fp8_gemm (bf16 tensor cores, fp32 sums)
// unless fp8_gemm is kSimple; by default and with kWgmma its prefill-sized calls take the same bits
// on bf16 WGMMAs (kernels::grouped_bf16_wgmma_gemm, x and the weight re-laid in the MMA steps' K
// order first), as do the bf16 linears' (kernels::bf16_wgmma_gemm). The tensor-core paths also need
// a bf16 x and K a multiple of 128 (cuBLASLt: a bf16 y and N a multiple of 8); other FP8-quantised
// linears quantise x to fp32 values in scratch and use simple_gemm.
#include <memory>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/stream_buffer.h"
#include "kernels/cuda_check.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/float_ptr.h"
#include "kernels/gemm/act_quant.h"
#include "kernels/gemm/bf16_mma_gemm.h"
#include "kernels/gemm/f16_wgmma_gemm.h"
#include "kernels/gemm/fp8_mma_gemm.h"
#include "kernels/gemm/grouped_bf16_fp8_gemm.h"
#include "kernels/gemm/simple_gemm.h"
#include "ops/param_checks.h"

namespace dsv4::cuda {

namespace {

constexpr int64_t kActQuantBlock = 128;

// kernels::fp8_mma_gemm of x's e4m3 codes xq and block scales xs (act_quant_fp8's, rows padded to
// x_scale_ld; either may be null until the caller sets it) against the FP8 weight w [n, k], into y [m, n].
kernels::Fp8MmaGemmParams fp8_mma_params(const uint8_t* xq, const float* xs, int64_t x_scale_ld,
                                         const GemmWeightView& w, TensorView y, int64_t m, int64_t n, int64_t k) {
  kernels::Fp8MmaGemmParams g;
  g.x = xq;
  g.x_scale = xs;
  g.x_scale_ld = x_scale_ld;
  g.w = static_cast<const uint8_t*>(w.data);
  g.w_scale = w.scale;
  g.w_scale_ld = w.scale_ld;
  g.y = float_ptr(y);
  g.ldy = n;
  g.m = m;
  g.n = n;
  g.k = k;
  return g;
}

}  // namespace

struct CudaOps::QuantisedX {
  StreamBuffer codes, scales;
};

CudaOps::QuantisedX CudaOps::quantise_x(const ConstTensorView& x, int64_t padded_rows, XForm form) {
  const int64_t M = x.dim(0), K = x.dim(1);
  const bool values = form != XForm::kCodes;
  QuantisedX q{StreamBuffer(static_cast<size_t>(padded_rows * K) * (values ? sizeof(uint16_t) : 1), stream_, arena()),
               StreamBuffer(static_cast<size_t>(K / kActQuantBlock * padded_rows) * sizeof(float), stream_, arena())};
  kernels::ActQuantParams quant{x.data<uint16_t>(), q.codes.get<uint8_t>(), q.scales.get<float>(), M, padded_rows, K};
  if (values) {
    quant.q16 = q.codes.get<uint16_t>();
    quant.q16_bf16_scaled = options_.fp8_gemm == Fp8Gemm::kChained;
    quant.q16_natural_order = form == XForm::kNatural;
  }
  kernels::act_quant_fp8(quant, stream_);
  return q;
}

void CudaOps::run_chained_streamed(kernels::Fp8MmaGemmParams g, const ConstTensorView& x) {
  const QuantisedX quantised = quantise_x(x, g.m, XForm::kNatural);
  g.x = nullptr;
  g.x16 = quantised.codes.get<uint16_t>();
  g.x_scale = nullptr;
  g.x_scale_ld = 0;
  g.kernel = kernels::Fp8MmaKernel::kChainedStreamed;
  kernels::fp8_mma_gemm(g, stream_);
}

void CudaOps::linear(const LinearParams& p) {
  check_params(p);
  const int64_t M = p.x.dim(0), K = p.x.dim(1);
  if (p.w == nullptr || p.w->shape.size() != 2) throw UsageError("linear: the weight must be 2-D [out, in]");
  const int64_t N = p.w->shape[0];
  const GemmWeightView w = gemm_weight("linear", p.w, N, K);
  expect_shape("linear", "y", p.y, {M, N});
  if (M == 0 || N == 0) return;

  const bool quantise = p.act_quant == ActQuant::kFp8Block128;
  const bool fp8_codes = quantise && w.type == kernels::GemmWeight::kE4M3 && p.x.dtype() == DType::kBF16 &&
                         K > 0 && K % kActQuantBlock == 0 && kernels::aligned16(p.x.bytes());
  const bool on_mma = fp8_codes && uses_fp8_mma(options_.fp8_gemm);
  const bool on_cublaslt = fp8_codes && options_.fp8_gemm == Fp8Gemm::kCublasLt && p.y.dtype() == DType::kBF16 &&
                           N % 8 == 0;
  if (on_mma || on_cublaslt) {
    kernels::Fp8MmaGemmParams g = fp8_mma_params(nullptr, nullptr, M, w, p.y, M, N, K);
    const bool chained = on_mma && options_.fp8_gemm == Fp8Gemm::kChained;
    // The chained order at every size: the WGMMA kernel where the default would take its staged
    // kernel (from 64 rows, not only from kF16WgmmaMinRows), else the streamed kernel.
    if (chained && !linear_takes_f16_wgmma(g, true)) {
      run_chained_streamed(g, p.x);
      return;
    }
    const bool f16 = on_mma && dense_fp8_on_fp16_mma(options_.fp8_gemm) && linear_takes_f16_wgmma(g, chained);
    // cuBLASLt wants padded rows; so do the TMA of the f16 WGMMA kernel and of kWgmma's FP8 one
    // (x's scales), which kWgmma gives the calls fp8_mma_gemm_choice puts on the staged kernel.
    const bool tma = f16 || (on_mma && options_.fp8_gemm == Fp8Gemm::kWgmma &&
                             kernels::fp8_mma_gemm_choice(g) == kernels::Fp8MmaKernel::kStaged);
    const int64_t mp = on_cublaslt ? fp8_gemm_padded_m(M) : tma ? (M + 3) / 4 * 4 : M;
    const QuantisedX quantised = quantise_x(p.x, mp, f16 ? XForm::kMmaOrder : XForm::kCodes);
    const StreamBuffer &xq = quantised.codes, &xs = quantised.scales;
    g.x_scale = xs.get<float>();
    g.x_scale_ld = mp;
    if (f16) {
      run_f16_wgmma(g, xq.get<uint16_t>());
      return;
    }
    if (on_mma) {
      g.x = xq.get<uint8_t>();
      run_fp8_mma(g);
      return;
    }
    const bool direct = mp == M && kernels::aligned16(p.y.bytes());
    std::unique_ptr<StreamBuffer> padded_out;
    if (!direct) padded_out = std::make_unique<StreamBuffer>(static_cast<size_t>(mp * N) * sizeof(uint16_t), stream_, arena());
    uint16_t* out = direct ? p.y.data<uint16_t>() : padded_out->get<uint16_t>();
    fp8_gemm_->run({xq.get<uint8_t>(), xs.get<float>(), static_cast<const uint8_t*>(w.data), w.scale, out, mp, N, K},
                   stream_);
    if (!direct)
      DSV4_CUDA_CHECK(cudaMemcpyAsync(p.y.bytes(), out, static_cast<size_t>(M * N) * sizeof(uint16_t),
                                      cudaMemcpyDeviceToDevice, stream_));
    return;
  }

  if (linear_on_bf16_mma(p.act_quant, p.x.dtype(), w.type)) {
    const kernels::Bf16MmaGemmParams b{p.x.data<uint16_t>(), K, static_cast<const uint16_t*>(w.data), float_ptr(p.y),
                                       N, M, N, K, {}};
    if (kernels::bf16_mma_gemm_supports(b)) {
      if (bf16_takes_wgmma(b)) {
        // The same bits on bf16 WGMMAs, x and the weight re-laid in the MMA steps' K order first.
        const StreamBuffer x_mma(static_cast<size_t>(M * K) * sizeof(uint16_t), stream_, arena());
        kernels::bf16_to_mma_order(b.x, K, x_mma.get<uint16_t>(), M, K, stream_);
        run_bf16_wgmma(b, x_mma.get<uint16_t>());
        return;
      }
      kernels::bf16_mma_gemm(b, stream_);
      return;
    }
  }

  kernels::FloatPtr x = float_ptr(p.x);
  std::unique_ptr<StreamBuffer> quantised;  // x rounded as the FP8 GEMM would see it, in fp32
  if (quantise) {
    quantised = std::make_unique<StreamBuffer>(static_cast<size_t>(M * K) * sizeof(float), stream_, arena());
    const kernels::MutFloatPtr xq{quantised->get<float>(), false};
    kernels::convert_copy({x, xq, M * K}, stream_);
    kernels::quant_sim_rows({xq, M, K, K, kActQuantBlock, false}, stream_);
    x = {quantised->get<float>(), false};
  }
  kernels::simple_gemm({x, K, w.data, w.type, w.scale, w.scale_ld, float_ptr(p.y), N, M, N, K}, stream_);
}

bool linear_takes_f16_wgmma(const kernels::Fp8MmaGemmParams& g, bool chained) {
  return g.tiles == nullptr && (chained || g.m >= kF16WgmmaMinRows) &&
         g.w_codes == kernels::Fp8MmaWeightCodes::kE4M3 && kernels::aligned16(g.w) &&
         kernels::fp8_mma_gemm_choice(g) == kernels::Fp8MmaKernel::kStaged;
}

void CudaOps::run_f16_wgmma(kernels::Fp8MmaGemmParams g, const uint16_t* x16) {
  const StreamBuffer w16(static_cast<size_t>(g.n * g.k) * sizeof(uint16_t), stream_, arena());
  if (options_.fp8_gemm == Fp8Gemm::kChained) {  // x16 holds scaled bf16 values (act_quant's q16_bf16_scaled)
    kernels::e4m3_to_bf16_scaled_mma_order(g.w, g.w_scale, g.w_scale_ld, w16.get<uint16_t>(), g.n, g.k, stream_);
    g.kernel = kernels::Fp8MmaKernel::kChainedBf16Wgmma;
  } else {
    kernels::e4m3_to_f16_mma_order(g.w, w16.get<uint16_t>(), g.n, g.k, stream_);
    g.kernel = kernels::Fp8MmaKernel::kF16Wgmma;
  }
  g.x16 = x16;
  g.w16 = w16.get<uint16_t>();
  kernels::fp8_mma_gemm(g, stream_);
}

bool CudaOps::linear_on_bf16_mma(ActQuant act_quant, DType x, kernels::GemmWeight w) const {
  return act_quant == ActQuant::kNone && options_.fp8_gemm != Fp8Gemm::kSimple && w == kernels::GemmWeight::kBF16 &&
         x == DType::kBF16;
}

bool CudaOps::bf16_takes_wgmma(const kernels::Bf16MmaGemmParams& b) const {
  return uses_fp8_mma(options_.fp8_gemm) && b.m >= kF16WgmmaMinRows &&
         kernels::bf16_mma_gemm_choice(b) == kernels::Bf16MmaKernel::kStaged;
}

void CudaOps::run_bf16_wgmma(const kernels::Bf16MmaGemmParams& b, const uint16_t* x_mma) {
  const StreamBuffer w_mma(static_cast<size_t>(b.n * b.k) * sizeof(uint16_t), stream_, arena());
  kernels::bf16_to_mma_order(b.w, b.k, w_mma.get<uint16_t>(), b.n, b.k, stream_);
  kernels::bf16_wgmma_gemm(x_mma, w_mma.get<uint16_t>(), b.y, b.ldy, b.m, b.n, b.k, stream_);
}

void CudaOps::run_fp8_mma(kernels::Fp8MmaGemmParams g) {
  // --fp8-gemm wgmma: the GEMMs the default would give the staged kernel take the WGMMA one, except
  // on FP4 experts kept as stored (e2m1 weights: WGMMA reads e4m3 tiles only), which keep the
  // staged kernel and the default's bits.
  if (options_.fp8_gemm == Fp8Gemm::kWgmma && g.w_codes == kernels::Fp8MmaWeightCodes::kE4M3 &&
      kernels::fp8_mma_gemm_choice(g) == kernels::Fp8MmaKernel::kStaged)
    g.kernel = kernels::Fp8MmaKernel::kWgmmaFp8;
  kernels::fp8_mma_gemm(g, stream_);
}

void CudaOps::linears(const LinearsParams& p) {
  if (p.outs.size() == 2 && linear_pair(p)) return;
  Ops::linears(p);
}

bool CudaOps::linear_pair(const LinearsParams& p) {
  const LinearOut& a = p.outs[0];
  const LinearOut& b = p.outs[1];
  for (const LinearOut& o : p.outs) check_params(LinearParams{p.x, o.w, o.act_quant, o.y});
  const int64_t M = p.x.dim(0), K = p.x.dim(1);
  if (M == 0 || a.act_quant != b.act_quant || p.x.dtype() != DType::kBF16 || options_.fp8_gemm == Fp8Gemm::kSimple)
    return false;
  for (const LinearOut& o : p.outs)
    if (o.w == nullptr || o.w->shape.size() != 2 || o.w->shape[1] != K || o.y.dim(1) != o.w->shape[0]) return false;
  const GemmWeightView wa = gemm_weight("linears", a.w, a.w->shape[0], K);
  const GemmWeightView wb = gemm_weight("linears", b.w, b.w->shape[0], K);
  if (wa.type != wb.type) return false;
  if (M >= kernels::kFp8MmaStagedMinRows) return linear_pair_on_wgmma(p, wa, wb);

  if (wa.type == kernels::GemmWeight::kE4M3 && a.act_quant == ActQuant::kFp8Block128 &&
      uses_fp8_mma(options_.fp8_gemm) && K % kActQuantBlock == 0 && kernels::aligned16(p.x.bytes())) {
    kernels::Fp8MmaGemmParams g = fp8_mma_params(nullptr, nullptr, M, wa, a.y, M, a.w->shape[0], K);
    g.second = {.w = static_cast<const uint8_t*>(wb.data), .w_scale = wb.scale, .w_scale_ld = wb.scale_ld,
                .y = float_ptr(b.y), .ldy = b.w->shape[0], .n = b.w->shape[0]};
    if (options_.fp8_gemm == Fp8Gemm::kChained) {
      run_chained_streamed(g, p.x);
      return true;
    }
    const QuantisedX quantised = quantise_x(p.x, M, XForm::kCodes);
    g.x = quantised.codes.get<uint8_t>();
    g.x_scale = quantised.scales.get<float>();
    run_fp8_mma(g);
    return true;
  }
  if (wa.type == kernels::GemmWeight::kBF16 && a.act_quant == ActQuant::kNone) {
    const kernels::Bf16MmaGemmParams g{p.x.data<uint16_t>(), K, static_cast<const uint16_t*>(wa.data), float_ptr(a.y),
                                       a.w->shape[0], M, a.w->shape[0], K,
                                       {static_cast<const uint16_t*>(wb.data), float_ptr(b.y), b.w->shape[0],
                                        b.w->shape[0]}};
    if (!kernels::bf16_mma_gemm_supports(g)) return false;
    kernels::bf16_mma_gemm(g, stream_);
    return true;
  }
  return false;
}

bool CudaOps::linear_pair_on_wgmma(const LinearsParams& p, const GemmWeightView& wa, const GemmWeightView& wb) {
  const LinearOut& a = p.outs[0];
  const LinearOut& b = p.outs[1];
  const int64_t M = p.x.dim(0), K = p.x.dim(1), Na = a.w->shape[0], Nb = b.w->shape[0];
  if (wa.type == kernels::GemmWeight::kE4M3 && a.act_quant == ActQuant::kFp8Block128 &&
      dense_fp8_on_fp16_mma(options_.fp8_gemm) && K % kActQuantBlock == 0 && kernels::aligned16(p.x.bytes())) {
    const int64_t mp = (M + 3) / 4 * 4;  // the TMA's padded rows, as linear() pads them
    kernels::Fp8MmaGemmParams ga = fp8_mma_params(nullptr, nullptr, mp, wa, a.y, M, Na, K);
    kernels::Fp8MmaGemmParams gb = fp8_mma_params(nullptr, nullptr, mp, wb, b.y, M, Nb, K);
    if (!linear_takes_f16_wgmma(ga) || !linear_takes_f16_wgmma(gb)) return false;
    const QuantisedX quantised = quantise_x(p.x, mp, XForm::kMmaOrder);
    ga.x_scale = gb.x_scale = quantised.scales.get<float>();
    run_f16_wgmma(ga, quantised.codes.get<uint16_t>());
    run_f16_wgmma(gb, quantised.codes.get<uint16_t>());
    return true;
  }
  if (wa.type == kernels::GemmWeight::kBF16 && a.act_quant == ActQuant::kNone) {
    const kernels::Bf16MmaGemmParams ba{p.x.data<uint16_t>(), K, static_cast<const uint16_t*>(wa.data), float_ptr(a.y),
                                        Na, M, Na, K, {}};
    const kernels::Bf16MmaGemmParams bb{p.x.data<uint16_t>(), K, static_cast<const uint16_t*>(wb.data), float_ptr(b.y),
                                        Nb, M, Nb, K, {}};
    if (!kernels::bf16_mma_gemm_supports(ba) || !kernels::bf16_mma_gemm_supports(bb) || !bf16_takes_wgmma(ba) ||
        !bf16_takes_wgmma(bb))
      return false;
    const StreamBuffer x_mma(static_cast<size_t>(M * K) * sizeof(uint16_t), stream_, arena());
    kernels::bf16_to_mma_order(p.x.data<uint16_t>(), K, x_mma.get<uint16_t>(), M, K, stream_);
    run_bf16_wgmma(ba, x_mma.get<uint16_t>());
    run_bf16_wgmma(bb, x_mma.get<uint16_t>());
    return true;
  }
  return false;
}

void CudaOps::grouped_linear(const GroupedLinearParams& p) {
  check_params(p);
  const int64_t T = p.x.dim(0), G = p.x.dim(1), K = p.x.dim(2), R = p.y.dim(2);
  const GemmWeightView w = gemm_weight("grouped_linear", p.w, G * R, K);
  // bf16 activations and FP8 weights (the default numerics' wo_a) on bf16 tensor cores, unless
  // the FP8 linears were asked to run on CUDA cores.
  if (options_.fp8_gemm != Fp8Gemm::kSimple && w.type == kernels::GemmWeight::kE4M3 &&
      p.x.dtype() == DType::kBF16 && kernels::aligned16(p.x.bytes()) && kernels::grouped_bf16_fp8_gemm_supports(R, K)) {
    const kernels::GroupedBf16Fp8GemmParams g{p.x.data<uint16_t>(), static_cast<const uint8_t*>(w.data), w.scale,
                                              w.scale_ld, float_ptr(p.y), T, G, R, K};
    if (uses_fp8_mma(options_.fp8_gemm) && T >= kF16WgmmaMinRows && kernels::grouped_bf16_wgmma_takes(g)) {
      const StreamBuffer x_mma(static_cast<size_t>(T * G * K) * sizeof(uint16_t), stream_, arena());
      const StreamBuffer w_mma(static_cast<size_t>(G * R * K) * sizeof(uint16_t), stream_, arena());
      kernels::bf16_to_mma_order(g.x, G * K, x_mma.get<uint16_t>(), T, G * K, stream_);
      kernels::e4m3_to_bf16_mma_order(g.w, w_mma.get<uint16_t>(), G * R, K, stream_);
      kernels::grouped_bf16_wgmma_gemm(g, x_mma.get<uint16_t>(), w_mma.get<uint16_t>(), stream_);
      return;
    }
    kernels::grouped_bf16_fp8_gemm(g, stream_);
    return;
  }
  kernels::SimpleGemmParams g{float_ptr(p.x), G * K, w.data, w.type, w.scale, w.scale_ld, float_ptr(p.y), G * R,
                              T, R, K};
  g.groups = G;
  g.x_group_stride = K;
  g.y_group_stride = R;
  kernels::simple_gemm(g, stream_);
}

}  // namespace dsv4::cuda
