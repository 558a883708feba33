#!/usr/bin/python3
"""Reference values for softmax, losses, slicing and attention (package op).

Run with Debian's interpreter (the one that has torch):

    /usr/bin/python3 scripts/reference/ops_loss.py

It writes op/testdata/loss.safetensors. For every case NAME it stores the
inputs NAME/x0, NAME/x1, ... (float32, or int64 class targets), the output
NAME/y, the output gradient NAME/seed (random) and, for every float input i,
NAME/g{i}, the gradient of sum(y * seed) with respect to input i. The
metadata entry "cases" lists the case names as JSON; op/loss_ref_test.go
rebuilds each case with headroom's ops and compares.

PyTorch 1.13 has no scaled_dot_product_attention; the attention cases use
the formula it is defined by: softmax(q k^T / sqrt(D) + mask) v, the causal
mask being -inf above the diagonal (torch.ones(L, S).tril() kept, aligned
top-left as is_causal=True does).
"""

import json
import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from st import save  # noqa: E402  (shared safetensors writer)

OUT = os.path.normpath(os.path.join(HERE, "..", "..", "op", "testdata", "loss.safetensors"))

gen = torch.Generator().manual_seed(1234)


def randn(*shape, scale=1.0):
    return (torch.randn(*shape, generator=gen, dtype=torch.float32) * scale)


def targets(shape, classes, ignore=None, frac=0.0):
    t = torch.randint(0, classes, shape, generator=gen, dtype=torch.int64)
    if ignore is not None and frac > 0:
        m = torch.rand(shape, generator=gen) < frac
        m.view(-1)[0] = True  # at least one ignored
        t[m] = ignore
    return t


def attention(q, k, v, causal):
    d = q.shape[-1]
    s = q @ k.transpose(-2, -1) / math.sqrt(d)
    if causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


CASES = []


def case(name, f, *inputs):
    CASES.append((name, f, inputs))


# softmax / log_softmax
for fn, fname in ((torch.softmax, "softmax"), (torch.log_softmax, "log_softmax")):
    for dim, dname in ((0, "d0"), (1, "d1"), (-1, "dm1")):
        case(f"{fname}_{dname}", lambda x, fn=fn, dim=dim: fn(x, dim), randn(3, 4, 5, scale=2))
    case(f"{fname}_long_row", lambda x, fn=fn: fn(x, -1), randn(4, 300, scale=8))
    case(f"{fname}_col_blocks", lambda x, fn=fn: fn(x, 1), randn(2, 5, 70, scale=3))

# cross entropy: (name, logits shape, ignore_index, ignored fraction, label smoothing, reduction)
CE = [
    ("ce_mean", (8, 5), -100, 0.0, 0.0, "mean"),
    ("ce_sum", (8, 5), -100, 0.0, 0.0, "sum"),
    ("ce_none", (8, 5), -100, 0.0, 0.0, "none"),
    ("ce_ignore_mean", (10, 6), -100, 0.3, 0.0, "mean"),
    ("ce_ignore_sum", (10, 6), -100, 0.3, 0.0, "sum"),
    ("ce_ignore_none", (10, 6), -100, 0.3, 0.0, "none"),
    ("ce_ls_mean", (8, 5), -100, 0.0, 0.1, "mean"),
    ("ce_ls_sum", (8, 5), -100, 0.0, 0.1, "sum"),
    ("ce_ls_none", (8, 5), -100, 0.0, 0.1, "none"),
    ("ce_ls_ignore_mean", (10, 6), -100, 0.3, 0.1, "mean"),
    ("ce_ls_ignore_sum", (10, 6), -100, 0.3, 0.1, "sum"),
    ("ce_ls_ignore_none", (10, 6), -100, 0.3, 0.1, "none"),
    ("ce_ignore_class", (9, 4), 1, 0.3, 0.2, "mean"),
    ("ce_spatial_mean", (2, 4, 3, 5), -100, 0.2, 0.0, "mean"),
    ("ce_spatial_none", (2, 4, 3, 5), -100, 0.2, 0.0, "none"),
    ("ce_spatial_ls_sum", (2, 4, 3, 5), -100, 0.2, 0.1, "sum"),
    ("ce_spatial_ls_mean", (2, 3, 6), 7, 0.25, 0.1, "mean"),
    ("ce_1d", (5,), -100, 0.0, 0.1, "none"),
    ("ce_wide", (4, 1000), -100, 0.25, 0.1, "mean"),
]
for name, shape, ign, frac, ls, red in CE:
    classes = shape[0] if len(shape) == 1 else shape[1]
    tshape = () if len(shape) == 1 else (shape[0],) + tuple(shape[2:])
    case(name, lambda x, t, ign=ign, ls=ls, red=red: F.cross_entropy(x, t, ignore_index=ign, label_smoothing=ls, reduction=red),
         randn(*shape, scale=2), targets(tshape, classes, ign, frac))

for red in ("mean", "sum", "none"):
    case(f"mse_{red}", lambda x, t, red=red: F.mse_loss(x, t, reduction=red), randn(4, 6), randn(4, 6))
    case(f"l1_{red}", lambda x, t, red=red: F.l1_loss(x, t, reduction=red), randn(4, 6), randn(4, 6))

# slicing
case("slice_step", lambda x: x[:, 1:7:2], randn(4, 7, 5))
case("slice_step3_axis0", lambda x: x[0:4:3], randn(4, 7, 5))
case("slice_neg_last", lambda x: x[..., -3:], randn(4, 7, 5))
case("slice_inner_step", lambda x: x[..., ::2], randn(3, 9))
case("narrow", lambda x: torch.narrow(x, 2, 1, 3), randn(4, 7, 5))
case("cat0", lambda a, b, c: torch.cat([a, b, c], 0), randn(2, 3, 4), randn(1, 3, 4), randn(3, 3, 4))
case("cat1", lambda a, b, c: torch.cat([a, b, c], 1), randn(2, 3, 4), randn(2, 1, 4), randn(2, 2, 4))
case("cat_last", lambda a, b, c: torch.cat([a, b, c], -1), randn(2, 3, 4), randn(2, 3, 2), randn(2, 3, 5))


def split_fn(x):
    p0, p1, p2 = torch.split(x, 3, dim=1)
    return torch.cat([p2 * 2, p0, p1 * p1], dim=1)


def chunk_fn(x):
    p0, _, p2 = torch.chunk(x, 3, dim=-1)
    return torch.cat([p0, p2], dim=-1)


case("split", split_fn, randn(2, 8, 3))
case("chunk_unused", chunk_fn, randn(2, 3, 7))

# attention
for causal in (False, True):
    tag = "causal" if causal else "full"
    case(f"attn_{tag}", lambda q, k, v, c=causal: attention(q, k, v, c), randn(2, 3, 5, 4), randn(2, 3, 5, 4), randn(2, 3, 5, 4))
    case(f"attn_t1_{tag}", lambda q, k, v, c=causal: attention(q, k, v, c), randn(2, 2, 1, 4), randn(2, 2, 1, 4), randn(2, 2, 1, 4))
    case(f"attn_cross_{tag}", lambda q, k, v, c=causal: attention(q, k, v, c), randn(2, 2, 3, 4), randn(2, 2, 6, 4), randn(2, 2, 6, 5))
    case(f"attn_long_{tag}", lambda q, k, v, c=causal: attention(q, k, v, c), randn(1, 2, 70, 8), randn(1, 2, 70, 8), randn(1, 2, 70, 8))


def main():
    out = {}
    names = []
    for name, f, inputs in CASES:
        xs = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
        y = f(*xs)
        seed = torch.rand(y.shape, generator=gen, dtype=torch.float32) * 2 - 1
        (y * seed).sum().backward()
        for i, x in enumerate(xs):
            out[f"{name}/x{i}"] = x.detach()
            if x.is_floating_point():
                out[f"{name}/g{i}"] = x.grad
        out[f"{name}/y"] = y.detach()
        out[f"{name}/seed"] = seed
        names.append(name)
    save(OUT, out, metadata={"cases": json.dumps(names), "torch": torch.__version__})
    print(f"wrote {len(names)} cases to {OUT}")


if __name__ == "__main__":
    main()
