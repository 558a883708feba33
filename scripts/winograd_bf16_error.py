#!/usr/bin/python3
"""How much error bfloat16 operands in the Winograd domain would add.

headroom runs bf16-mixed 3x3 convolutions (RRDBNet's) on the float32
Winograd F(4x4, 3x3) kernels, reading the bf16 values widened: exact
inputs, float32 sums, as autocast's float32 accumulation has them. A
bf16 Winograd (VDPBF16PS or AMX on the transformed tiles) would round the
transformed input B^T d B and weights G g G^T to bfloat16 as well. This
prints that error next to the error of float32 Winograd and next to the
rounding of the output to bfloat16 that autocast applies anyway, all
against the exact convolution (float64) of the same bf16 inputs.

Run: /usr/bin/python3 scripts/winograd_bf16_error.py (python3-numpy).
Measured 2026-12-03: bf16 transformed operands 2.4e-2 rms relative (max
0.30-0.31), float32 Winograd 1.6-2.7e-6, autocast's output rounding 1.7e-3:
bf16 in the Winograd domain adds about 15 times the error autocast does,
so headroom keeps the Winograd arithmetic in float32.
"""
import numpy as np

rng = np.random.default_rng(0)


def bf16(a):
    """Round float32 values to bfloat16 (nearest even), kept as float32."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


BT = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
               [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64)
AT = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64)
G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
              [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64)


def winograd(v, u):
    m = np.einsum('tcij,kcij->tkij', v, u)
    return np.einsum('ij,tkjl,ml->tkim', AT, m, AT)


for c in (64, 192):  # RRDBNet's narrowest and widest 3x3 inputs into 32 channels
    k, tiles = 32, 400
    d = bf16(rng.standard_normal((tiles, c, 6, 6))).astype(np.float64)
    g = bf16(rng.standard_normal((k, c, 3, 3)) * np.sqrt(2 / (9 * c))).astype(np.float64)
    y = np.zeros((tiles, k, 4, 4))
    for i in range(4):
        for j in range(4):
            y[:, :, i, j] = np.einsum('tcab,kcab->tk', d[:, :, i:i + 3, j:j + 3], g)
    v = np.einsum('ij,tcjk,lk->tcil', BT, d, BT)
    u = np.einsum('ij,kcjl,ml->kcim', G, g, G)
    scale = np.sqrt(np.mean(y ** 2))
    for name, e in (("float32 Winograd", winograd(v.astype(np.float32), u.astype(np.float32)) - y),
                    ("bf16 transformed operands", winograd(bf16(v).astype(np.float64), bf16(u).astype(np.float64)) - y),
                    ("autocast's output rounding", bf16(y).astype(np.float64) - y)):
        print("C=%-3d %-27s rms relative %.2e, max %.2e" % (c, name, np.sqrt(np.mean(e ** 2)) / scale, np.max(np.abs(e)) / scale))
