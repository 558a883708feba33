#!/usr/bin/python3
"""Reference values for dataset.BicubicDown: PyTorch's antialiased bicubic
downscale (interpolate(mode="bicubic", antialias=True), PIL's BICUBIC on
float images) by 4 and by 2, of a hashed image, and PIL's own result on
the 8-bit version of it. Writes dataset/testdata/bicubic.safetensors.

    /usr/bin/python3 scripts/reference/bicubic_ref.py
"""

import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import zoo_ref  # noqa: E402
from st import save  # noqa: E402

OUT = os.path.normpath(os.path.join(HERE, "..", "..", "dataset", "testdata", "bicubic.safetensors"))

x = zoo_ref.hash_tensor("image", (1, 3, 24, 40), 0.5, 0.5)
t = {"x": x[0]}
for f in (2, 4):
    t[f"down{f}"] = F.interpolate(x, scale_factor=1 / f, mode="bicubic", antialias=True, align_corners=False)[0]
# PIL on 8-bit pixels: the same filter, rounded to 8 bits.
u8 = (x[0] * 255).round().clamp(0, 255).to(torch.uint8)
img = Image.fromarray(u8.permute(1, 2, 0).numpy(), "RGB").resize((10, 6), Image.BICUBIC)
t["x_u8"] = u8
t["pil_down4_u8"] = torch.from_numpy(np.asarray(img).copy()).permute(2, 0, 1).contiguous()
save(OUT, t)
print("wrote", OUT)
