#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_safetensors_header: tiny valid and invalid safetensors images.

Run from anywhere; it rewrites fuzz/corpus/safetensors_header/. The seeds are committed, so this
only needs running when they change.
"""
import json
import pathlib
import struct

OUT = pathlib.Path(__file__).resolve().parent / "corpus" / "safetensors_header"


def image(header, data: bytes = b"") -> bytes:
    """Length prefix, JSON header (space-padded to a multiple of 8 bytes), then data."""
    text = (header if isinstance(header, str) else json.dumps(header)).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def tensor(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


SEEDS = {
    "valid_empty": image({}),
    "valid_two_tensors_metadata": image(
        {"__metadata__": {"format": "pt"}, "a": tensor("F32", [2], 0, 8),
         "b": tensor("BF16", [3], 8, 14)}, bytes(14)),
    "valid_scalar_and_empty": image(
        {"s": tensor("I64", [], 0, 8), "e": tensor("U8", [0, 4], 8, 8)}, bytes(8)),
    "valid_every_dtype": image(
        {"bf16": tensor("BF16", [2], 0, 4), "f32": tensor("F32", [2], 4, 12),
         "e4m3": tensor("F8_E4M3", [2], 12, 14), "e8m0": tensor("F8_E8M0", [2], 14, 16),
         "i8": tensor("I8", [2], 16, 18), "u8": tensor("U8", [2], 18, 20),
         "i32": tensor("I32", [2], 20, 28), "i64": tensor("I64", [2], 28, 44)}, bytes(44)),
    "invalid_overlap": image(
        {"a": tensor("F32", [2], 0, 8), "b": tensor("F32", [2], 4, 12)}, bytes(12)),
    "invalid_unknown_dtype": image({"a": tensor("F16", [2], 0, 4)}, bytes(4)),
    "invalid_size_mismatch": image({"a": tensor("F32", [3], 0, 8)}, bytes(8)),
    "invalid_out_of_range": image({"a": tensor("U8", [16], 0, 16)}, bytes(4)),
    "invalid_json": image('{"a": {"dtype": "F32", "shape": [2', bytes(8)),
    "invalid_truncated": struct.pack("<Q", 64) + b'{"a": {}}',
}

OUT.mkdir(parents=True, exist_ok=True)
for old in OUT.iterdir():
    old.unlink()
for name, data in SEEDS.items():
    (OUT / name).write_bytes(data)
