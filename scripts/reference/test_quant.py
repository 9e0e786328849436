# Checks of the reference's number formats (quant.py) against hand values, brute-force
# nearest-value searches and torch's own float8 casts.
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import quant  # noqa: E402
from testing import run_tests  # noqa: E402


def as_list(t: torch.Tensor) -> list:
    return [float(v) for v in t]


def test_e4m3_hand_values():
    cases = {
        1.0: 1.0, 1.125: 1.125, 448.0: 448.0, 0.0: 0.0,
        1.0625: 1.0,        # tie between 1.0 (mantissa 000) and 1.125 (001) -> even
        1.1875: 1.25,       # tie between 1.125 (001) and 1.25 (010) -> even
        232.0: 224.0,       # tie between 224 (110) and 240 (111) -> even
        -1.0625: -1.0,
        2.0**-9: 2.0**-9,   # smallest subnormal
        2.0**-10: 0.0,      # tie between 0 and 2^-9 -> 0
        3 * 2.0**-10: 2.0**-8,  # tie between 2^-9 (code 1) and 2^-8 (code 2) -> even
        464.0: 448.0, 500.0: 448.0, -1e6: -448.0,  # saturation
        1.06: 1.0, 1.07: 1.125,
    }
    got = quant.round_e4m3(torch.tensor(list(cases.keys())))
    assert as_list(got) == list(cases.values()), list(zip(cases.keys(), as_list(got)))


def test_e2m1_hand_values():
    cases = {0.25: 0.0, 0.75: 1.0, 1.25: 1.0, 1.75: 2.0, 2.5: 2.0, 3.5: 4.0, 5.0: 4.0,
             -0.25: 0.0, -0.75: -1.0, -5.0: -4.0, 0.3: 0.5, 0.2: 0.0, 2.6: 3.0, 5.1: 6.0,
             7.0: 6.0, -100.0: -6.0, 1.5: 1.5, 6.0: 6.0}
    got = quant.round_e2m1(torch.tensor(list(cases.keys())))
    assert as_list(got) == list(cases.values()), list(zip(cases.keys(), as_list(got)))  # -0.0 == 0.0


def brute_force_round(x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    """Nearest grid value (grid sorted ascending, non-negative, codes = positions), ties to the
    even code, by exhaustive search; sign restored."""
    a = x.abs().unsqueeze(-1)
    dist = (a - grid).abs()
    best = dist.min(dim=-1, keepdim=True).values
    tied = dist == best
    code = torch.arange(grid.numel())
    even_pick = torch.where(tied & (code % 2 == 0), code, grid.numel()).min(dim=-1).values
    any_pick = torch.where(tied, code, grid.numel()).min(dim=-1).values
    pick = torch.where(even_pick < grid.numel(), even_pick, any_pick)
    return torch.copysign(grid[pick], x)


def midpoints_and_randoms(grid: torch.Tensor, max_value: float, seed: int) -> torch.Tensor:
    mids = (grid[1:] + grid[:-1]) / 2
    g = torch.Generator().manual_seed(seed)
    exps = torch.randint(-12, 10, (20000,), generator=g).float()
    rand = torch.randn(20000, generator=g) * torch.pow(2.0, exps)
    x = torch.cat([grid, mids, -mids, rand])
    return x[x.abs() <= max_value]


def test_e4m3_matches_brute_force():
    grid = quant.E4M3_TABLE[:0x7F]  # non-negative finite codes 0..126, ascending
    assert bool((grid[1:] > grid[:-1]).all())
    x = midpoints_and_randoms(grid, 448.0, 1)
    assert torch.equal(quant.round_e4m3(x), brute_force_round(x, grid))


def test_e2m1_matches_brute_force():
    grid = torch.tensor(quant.E2M1_MAGNITUDES)
    x = midpoints_and_randoms(grid, 6.0, 2)
    assert torch.equal(quant.round_e2m1(x), brute_force_round(x, grid))


def test_e4m3_matches_torch_cast():
    # torch's float8_e4m3fn conversion rounds to nearest even; in range it must agree with ours.
    grid = quant.E4M3_TABLE[:0x7F]
    x = midpoints_and_randoms(grid, 448.0, 3)
    assert torch.equal(quant.round_e4m3(x), x.to(torch.float8_e4m3fn).to(torch.float32))


def test_e4m3_table_matches_torch():
    raw = torch.arange(256, dtype=torch.int64).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float32)
    both_nan = torch.isnan(raw) & torch.isnan(quant.E4M3_TABLE)
    assert bool(((raw == quant.E4M3_TABLE) | both_nan).all())
    assert int(torch.isnan(quant.E4M3_TABLE).sum()) == 2  # 0x7F and 0xFF


def test_ceil_log2_and_pow2():
    x = torch.tensor([1.0, 1.5, 0.25, 0.3, 448.0, 2.0**-126, 3.0 * 2.0**20])
    assert quant.ceil_log2(x).tolist() == [0, 1, -2, -1, 9, -126, 22]
    assert as_list(quant.pow2(torch.tensor([0, -3, 5]))) == [1.0, 0.125, 32.0]


def test_scale_reciprocal_matches_division():
    # The kernels compute amax * fp32(1/448); MODEL.md writes amax / 448. For every positive
    # finite bf16 amax both give the same ceil(log2).
    bits = torch.arange(1, 0x7F80, dtype=torch.int32).to(torch.int16)
    amax = bits.view(torch.bfloat16).to(torch.float32)
    for fmax, inv in ((448.0, quant.FP8_MAX_INV), (6.0, quant.FP4_MAX_INV)):
        assert torch.equal(quant.ceil_log2(amax * inv), quant.ceil_log2(amax / fmax))


def test_fp8_block_scales():
    # Block of 4: amax 448 -> scale 1; amax 449 -> scale 2 (449/2 = 224.5 -> 224); amax 1e-6 ->
    # floored to 1e-4 -> scale 2^-22.
    x = torch.tensor([[448.0, 1.0625, -3.0, 0.0],
                      [449.0, 3.0, 1.0, -0.5],
                      [1e-6, 0.0, 0.0, 0.0]])
    got = quant.fp8_quant_dequant(x, 4)
    expect = torch.tensor([[448.0, 1.0, -3.0, 0.0],
                           [448.0, 3.0, 1.0, -0.5],
                           [quant.round_e4m3(torch.tensor(1e-6 * 2**22)).item() * 2.0**-22, 0.0, 0.0, 0.0]])
    assert torch.equal(got, expect), got


def test_fp4_block_scales():
    # amax 6 -> scale 1; amax 3 -> scale 0.5 (3/6 = 0.5 exactly); amax 3.1 -> scale 1.
    x = torch.tensor([[6.0, 0.25, 0.75, 5.0] * 8,
                      [3.0, 0.125, 0.375, 2.5] * 8,
                      [3.1, 0.25, 0.75, 2.5] * 8])
    got = quant.fp4_quant_dequant(x, 32)
    expect = torch.tensor([[6.0, 0.0, 1.0, 4.0] * 8,
                           [3.0, 0.0, 0.5, 2.0] * 8,
                           [3.0, 0.0, 1.0, 2.0] * 8])
    assert torch.equal(got, expect), got


def test_dequant_fp8_weight_block_scales():
    # 130 x 200 weight of ones; scale blocks [2, 2] with exponents 0, 1, -1, 3.
    w = torch.ones(130, 200).to(torch.float8_e4m3fn)
    s = torch.tensor([[127, 128], [126, 130]], dtype=torch.uint8).view(torch.float8_e8m0fnu)
    d = quant.dequant_fp8_weight(w, s, "w")
    assert d.shape == (130, 200)
    assert d[0, 0] == 1.0 and d[127, 127] == 1.0 and d[0, 128] == 2.0 and d[128, 0] == 0.5 and d[129, 199] == 8.0


def test_dequant_mxfp4_nibble_order():
    # Byte 0x21: low nibble code 1 (0.5) is element 0, high nibble code 2 (1.0) is element 1.
    # Byte 0xF9: low code 9 (-0.5), high code 15 (-6).
    row = torch.tensor([0x21, 0xF9] + [0] * 14, dtype=torch.uint8)
    w = torch.stack([row, row]).view(torch.int8)  # [2, 16] -> 32 values per row
    s = torch.tensor([[127], [129]], dtype=torch.uint8).view(torch.float8_e8m0fnu)
    d = quant.dequant_mxfp4_weight(w, s, "w")
    assert d.shape == (2, 32)
    assert as_list(d[0, :4]) == [0.5, 1.0, -0.5, -6.0]
    assert as_list(d[1, :4]) == [2.0, 4.0, -2.0, -24.0]
    assert float(d[:, 4:].abs().sum()) == 0.0


def test_hadamard_orthonormal():
    h = quant.hadamard_matrix(128)
    assert torch.equal(h @ h.T, 128 * torch.eye(128))
    assert h[1, :4].tolist() == [1.0, -1.0, 1.0, -1.0]  # Sylvester order
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(5, 128, generator=g), torch.randn(7, 128, generator=g)
    assert torch.allclose(quant.hadamard(q) @ quant.hadamard(k).T, q @ k.T, atol=1e-4)


if __name__ == "__main__":
    run_tests(dict(globals()))
