# Number formats of the DeepSeek-V4 reference (MODEL.md §7.1, §14): bf16 rounding, e4m3 and
# e2m1 round-to-nearest-even by hand, pow2 block scales, weight dequantisation, Hadamard.
"""All functions take and return float32 tensors unless said otherwise.

The rounding is written out by hand (not through torch's float8 casts) so that this module is
an independent statement of MODEL.md §14; test_quant.py cross-checks it against torch's casts.
"""
import torch

FP8_MAX = 448.0
FP4_MAX = 6.0
# The official kernels multiply by the fp32 reciprocal (amax * (1/448)); for bf16 amax values
# this gives the same ceil(log2) as amax / 448 (checked over every bf16 value in test_quant.py).
FP8_MAX_INV = torch.tensor(1.0 / FP8_MAX, dtype=torch.float32)
FP4_MAX_INV = torch.tensor(1.0 / FP4_MAX, dtype=torch.float32)
FP8_AMAX_FLOOR = 1e-4
FP4_AMAX_FLOOR = 6.0 * 2.0**-126

# e2m1 magnitudes of codes 0..7 (bit 3 is the sign), MODEL.md §7.1.
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def round_bf16(x: torch.Tensor) -> torch.Tensor:
    """Round float32 values to the nearest bf16 (ties to even), returned as float32."""
    return x.to(torch.bfloat16).to(torch.float32)


def ceil_log2(x: torch.Tensor) -> torch.Tensor:
    """ceil(log2(x)) of positive normal float32 values from the bits: exponent - 127 + (mantissa != 0)."""
    bits = x.contiguous().view(torch.int32)
    exponent = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    return exponent - 127 + (mantissa != 0).to(torch.int32)


def pow2(e: torch.Tensor) -> torch.Tensor:
    """2^e as float32 for an integer tensor e."""
    return torch.ldexp(torch.ones_like(e, dtype=torch.float32), e.to(torch.float32))


def _round_to_grid(x: torch.Tensor, min_exponent: int, mantissa_bits: int) -> torch.Tensor:
    """Round to a binary float grid with `mantissa_bits` explicit mantissa bits whose smallest
    normal exponent is `min_exponent` (below it the spacing stays 2^(min_exponent - m)), ties
    to even. No overflow handling: callers clamp to the format's largest value first."""
    a = x.abs()
    _, e = torch.frexp(a)  # a = f * 2^e with f in [0.5, 1), so floor(log2 a) = e - 1
    exponent = torch.clamp(e.to(torch.int32) - 1, min=min_exponent)
    quantum = pow2(exponent - mantissa_bits)
    return torch.copysign(torch.round(a / quantum) * quantum, x)  # torch.round: half to even


def round_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Nearest float8 e4m3fn value (ties to even), saturating at ±448."""
    return _round_to_grid(torch.clamp(x, -FP8_MAX, FP8_MAX), min_exponent=-6, mantissa_bits=3)


def round_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Nearest e2m1 value in {0,.5,1,1.5,2,3,4,6} (ties to the even code), saturating at ±6."""
    return _round_to_grid(torch.clamp(x, -FP4_MAX, FP4_MAX), min_exponent=0, mantissa_bits=1)


def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    if x.shape[-1] % block != 0:
        raise ValueError(f"last dim {x.shape[-1]} is not a multiple of the quant block {block}")
    return x.reshape(*x.shape[:-1], x.shape[-1] // block, block)


def fp8_quant_dequant(x: torch.Tensor, block: int) -> torch.Tensor:
    """FP8 e4m3 quantise with one pow2 scale per `block` consecutive values along the last dim
    (scale 2^ceil(log2(max(amax, 1e-4) / 448))), then dequantise: returns q * s exactly."""
    xb = _blocks(x, block)
    amax = xb.abs().amax(dim=-1, keepdim=True).clamp_min(FP8_AMAX_FLOOR)
    scale = pow2(ceil_log2(amax * FP8_MAX_INV))
    return (round_e4m3(xb / scale) * scale).reshape(x.shape)


def fp4_quant_dequant(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """FP4 e2m1 quantise with one pow2 scale per `block` values (scale 2^ceil(log2(max(amax,
    6*2^-126) / 6))), then dequantise: returns q * s exactly."""
    xb = _blocks(x, block)
    amax = xb.abs().amax(dim=-1, keepdim=True).clamp_min(FP4_AMAX_FLOOR)
    scale = pow2(ceil_log2(amax * FP4_MAX_INV))
    return (round_e2m1(xb / scale) * scale).reshape(x.shape)


# ---------------------------------------------------------------------------------------------
# Checkpoint formats, decoded from raw bytes.


def _e4m3_table() -> torch.Tensor:
    """Value of each float8 e4m3fn byte: sign 1, exponent 4 (bias 7), mantissa 3; 0x7F/0xFF NaN."""
    values = []
    for byte in range(256):
        sign = -1.0 if byte & 0x80 else 1.0
        exponent = (byte >> 3) & 0xF
        mantissa = byte & 0x7
        if exponent == 0xF and mantissa == 0x7:
            values.append(float("nan"))
        elif exponent == 0:
            values.append(sign * mantissa / 8.0 * 2.0**-6)
        else:
            values.append(sign * (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7))
    return torch.tensor(values, dtype=torch.float32)


E4M3_TABLE = _e4m3_table()
E2M1_TABLE = torch.tensor(
    list(E2M1_MAGNITUDES) + [-v for v in E2M1_MAGNITUDES], dtype=torch.float32
)


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a 1-byte tensor (fp8, e8m0, int8) as int64 indices."""
    if t.element_size() != 1:
        raise ValueError(f"expected a 1-byte dtype, got {t.dtype}")
    return t.contiguous().view(torch.uint8).to(torch.int64)


def decode_e8m0(scale: torch.Tensor) -> torch.Tensor:
    """e8m0 scale bytes b -> 2^(b - 127)."""
    return pow2(as_bytes(scale) - 127)


def dequant_fp8_weight(weight: torch.Tensor, scale: torch.Tensor, name: str) -> torch.Tensor:
    """FP8 e4m3 weight [out, in] with e8m0 block scales [ceil(out/128), ceil(in/128)] -> fp32."""
    out_f, in_f = weight.shape
    expect = ((out_f + 127) // 128, (in_f + 127) // 128)
    if tuple(scale.shape) != expect:
        raise ValueError(f"{name}: scale shape {tuple(scale.shape)}, expected {expect}")
    w = E4M3_TABLE[as_bytes(weight)]
    s = decode_e8m0(scale).repeat_interleave(128, 0).repeat_interleave(128, 1)[:out_f, :in_f]
    return w * s


def dequant_mxfp4_weight(weight: torch.Tensor, scale: torch.Tensor, name: str) -> torch.Tensor:
    """MXFP4 weight stored as int8 [out, in/2] (even element in the low nibble) with e8m0
    scales [out, in/32] -> fp32 [out, in]."""
    out_f, half_in = weight.shape
    in_f = half_in * 2
    if tuple(scale.shape) != (out_f, in_f // 32):
        raise ValueError(f"{name}: scale shape {tuple(scale.shape)}, expected {(out_f, in_f // 32)}")
    b = as_bytes(weight)
    codes = torch.stack([b & 0xF, b >> 4], dim=-1).reshape(out_f, in_f)
    return E2M1_TABLE[codes] * decode_e8m0(scale).repeat_interleave(32, 1)


def hadamard_matrix(n: int) -> torch.Tensor:
    """Sylvester-order Hadamard matrix H_n (entries ±1), n a power of two."""
    if n & (n - 1):
        raise ValueError(f"Hadamard size {n} is not a power of two")
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """x @ H_n / sqrt(n) along the last dim (orthonormal; H_n is symmetric)."""
    n = x.shape[-1]
    return (x @ hadamard_matrix(n)) * n**-0.5
