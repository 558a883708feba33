"""Writes safetensors/testdata/torch_ref.safetensors for the Go reader test.

Run from anywhere with Debian's python3 (it has torch):

    /usr/bin/python3 scripts/reference/safetensors_ref.py

Every tensor is built from torch.arange so the Go test can recompute the
expected values from the index alone, without trusting this file's reader.
Float16/bfloat16 values are exactly representable, so the check is about the
file format (byte order, offsets, shapes), not about rounding.
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402

OUT = os.path.join(HERE, "..", "..", "safetensors", "testdata", "torch_ref.safetensors")


def tensors():
    return {
        # (i - 6) / 4
        "f32": (torch.arange(-6, 6, dtype=torch.float32) / 4).reshape(3, 4),
        # a transposed (non-contiguous) tensor: element [i][j] = 4*j + i
        "f32_t": torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),
        # (i - 3) / 3, rounded by IEEE float64 division
        "f64": (torch.arange(-3, 3, dtype=torch.float64) / 3).reshape(2, 3),
        # (i - 8) * 0.25, exact in float16
        "f16": (torch.arange(-8, 8, dtype=torch.float32) * 0.25).to(torch.float16).reshape(4, 4),
        # (i - 8) * 0.5, exact in bfloat16
        "bf16": (torch.arange(-8, 8, dtype=torch.float32) * 0.5).to(torch.bfloat16).reshape(2, 8),
        # i - 5
        "i32": torch.arange(-5, 7, dtype=torch.int32).reshape(3, 2, 2),
        # (i - 3) * 2^40 + 7: needs all 8 bytes
        "i64": torch.arange(-3, 3, dtype=torch.int64) * (1 << 40) + 7,
        # 37 * i
        "u8": torch.arange(0, 256, 37, dtype=torch.uint8),
        # i % 3 == 0
        "bool": torch.arange(10) % 3 == 0,
        "scalar": torch.tensor(3.5, dtype=torch.float32),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
    }


def main():
    st.save(OUT, tensors(), metadata={"format": "pt", "source": "scripts/reference/safetensors_ref.py"})
    # Reading it back through st.load checks the writer against itself only;
    # the independent check is the Go test.
    back, _ = st.load(OUT)
    for name, t in tensors().items():
        assert torch.equal(back[name], t), name
    print("wrote", os.path.normpath(OUT), os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
