"""Writes tensor/testdata/half.safetensors: PyTorch's float32 <-> float16 and
float32 <-> bfloat16 conversions, bit for bit, for the Go tests of
tensor/half.go.

    /usr/bin/python3 scripts/reference/tensor_ref.py

Tensors in the file:
  f32          float32 inputs: hand-picked edge cases, then random values
  f16, bf16    inputs.to(float16 / bfloat16) on a whole tensor (ATen's
               vectorized CPU kernel)
  bf16_scalar  each input converted alone, as a 0-dim tensor (c10::BFloat16's
               scalar round_to_nearest_even). The two bfloat16 paths differ
               only for NaN: the vectorized one writes 0xffff, the scalar one
               0x7fc0. This script asserts that.
  f16_to_f32   all 65536 float16 bit patterns (index = bits) to float32
  bf16_to_f32  all 65536 bfloat16 bit patterns to float32
  n_edge       (I64 scalar) how many leading entries of f32 are edge cases
"""

import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402

OUT = os.path.join(HERE, "..", "..", "tensor", "testdata", "half.safetensors")


def f32(x):
    """Round a Python float to float32 bits."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def edge_bits():
    e = [
        0x00000000, 0x7F800000,  # +0, +inf
        0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0x7FA00000, 0x7F812345,  # NaNs, quiet and signalling
        0x00000001, 0x007FFFFF, 0x00800000,  # float32 subnormals, min normal
        0x7F7FFFFF,  # float32 max
    ]
    # float16 range ends.
    e += [f32(65504.0), f32(65504.0 + 8), f32(65520.0), f32(65520.0) - 1, f32(65520.0) + 1,
          f32(65536.0), f32(1e10)]
    # float16 subnormals and underflow: min normal 2^-14, min subnormal 2^-24.
    for k in (-14, -15, -23, -24, -25, -26, -27):
        b = f32(2.0 ** k)
        e += [b, b - 1, b + 1]
    e += [f32(3 * 2.0 ** -25), f32(5 * 2.0 ** -25), f32(1023 * 2.0 ** -24), f32(1023.5 * 2.0 ** -24),
          f32(2.0 ** -14 - 2.0 ** -25)]
    # float16 ties in the normal range: halfway cases round to even.
    for base in (1.0, 1.0 + 2.0 ** -10, 1024.0, 2.0 ** -13, 32768.0):
        b = f32(base)
        e += [b + 0x1000, b + 0x0FFF, b + 0x1001, b + 0x3000]
    e += [0x3F7FF000, 0x477FE000, 0x477FF000, 0x477FEFFF]  # rounding carries into the exponent / to inf
    # bfloat16 ties and carries.
    for b in (0x3F800000, 0x3F810000, 0x00010000, 0x00000000, 0x7F7E0000, 0x7F7F0000):
        e += [b + 0x8000, b + 0x7FFF, b + 0x8001, b + 0xFFFF]
    e += [0x3F7FFFFF, 0x3F7F8000, 0x7F7F7FFF]
    # Ordinary values.
    e += [f32(x) for x in (1.0, 0.1, 1 / 3, 3.14159265, 2.718281828, 1e-3, 1e-5, 1e-8, 1e-40, 100.0, 1e4, 1e5, 1e30, 1e38)]
    e = [b & 0xFFFFFFFF for b in e]
    return e + [b | 0x80000000 for b in e]  # and their negatives


def random_bits(rng, n):
    parts = []
    # Any 32-bit pattern: every exponent, NaNs and subnormals included.
    parts.append(rng.integers(0, 2**32, size=n // 3, dtype=np.uint64))
    # Magnitudes where float16 is interesting: 2^-30 .. 2^17.
    m = n // 3
    sign = rng.integers(0, 2, size=m, dtype=np.uint64) << 31
    exp = rng.integers(127 - 30, 127 + 17, size=m, dtype=np.uint64) << 23
    man = rng.integers(0, 2**23, size=m, dtype=np.uint64)
    parts.append(sign | exp | man)
    # Exact ties and their neighbours for both formats, at random magnitudes.
    m = n - len(parts[0]) - len(parts[1])
    sign = rng.integers(0, 2, size=m, dtype=np.uint64) << 31
    exp = rng.integers(1, 255, size=m, dtype=np.uint64) << 23
    hi = rng.integers(0, 2**23, size=m, dtype=np.uint64)
    low = rng.choice(np.array([0x1000, 0x0FFF, 0x1001, 0x8000, 0x7FFF, 0x8001], dtype=np.uint64), size=m)
    mask = np.where(low < 0x2000, ~np.uint64(0x1FFF), ~np.uint64(0xFFFF)) & np.uint64(0x7FFFFF)
    parts.append(sign | exp | (hi & mask) | low)
    return np.concatenate(parts).astype(np.uint32)


def bits_tensor(u32):
    return torch.from_numpy(np.asarray(u32, dtype=np.uint32).view(np.int32)).view(torch.float32)


def u16(t):
    return t.view(torch.int16).numpy().view(np.uint16)


def main():
    rng = np.random.default_rng(20240601)
    edges = edge_bits()
    x = bits_tensor(np.concatenate([np.array(edges, dtype=np.uint32), random_bits(rng, 10000)]))
    assert np.array_equal(x.view(torch.int32).numpy().view(np.uint32)[: len(edges)], np.array(edges, dtype=np.uint32))

    f16 = x.to(torch.float16)
    bf16 = x.to(torch.bfloat16)
    f16_scalar = torch.stack([v.to(torch.float16) for v in x])
    bf16_scalar = torch.stack([v.to(torch.bfloat16) for v in x])
    nan = torch.isnan(x).numpy()
    assert np.array_equal(u16(f16), u16(f16_scalar)), "float16: vectorized and scalar paths differ"
    assert np.array_equal(u16(bf16)[~nan], u16(bf16_scalar)[~nan]), "bfloat16 paths differ on a non-NaN"
    assert (u16(bf16)[nan] == 0xFFFF).all() and (u16(bf16_scalar)[nan] == 0x7FC0).all(), "bfloat16 NaN encodings changed"

    every = torch.arange(65536, dtype=torch.int32).to(torch.int16)
    f16_to_f32 = every.view(torch.float16).to(torch.float32)
    bf16_to_f32 = every.view(torch.bfloat16).to(torch.float32)
    for dt, vec in ((torch.float16, f16_to_f32), (torch.bfloat16, bf16_to_f32)):
        scalar = torch.stack([v.to(torch.float32) for v in every.view(dt)])
        assert torch.equal(vec.view(torch.int32), scalar.view(torch.int32)), f"{dt} -> float32: paths differ"

    st.save(OUT, {
        "f32": x,
        "f16": f16,
        "bf16": bf16,
        "bf16_scalar": bf16_scalar,
        "f16_to_f32": f16_to_f32,
        "bf16_to_f32": bf16_to_f32,
        "n_edge": torch.tensor(len(edges), dtype=torch.int64),
    }, metadata={"torch": torch.__version__, "source": "scripts/reference/tensor_ref.py"})
    print("wrote", os.path.normpath(OUT), os.path.getsize(OUT), "bytes;", len(edges), "edge cases,", nan.sum(), "NaNs")


if __name__ == "__main__":
    main()
