#!/usr/bin/python3
"""Reference values for conv2d, pooling and nearest upsampling (PyTorch 1.13).

Run with Debian's interpreter (the one that has torch):

    /usr/bin/python3 scripts/reference/ops_conv.py

It writes op/testdata/conv.safetensors. For every case NAME it stores, in
float32:

  NAME/x, NAME/w, NAME/b   inputs (w and b for conv2d; b only with a bias)
  NAME/seed                the output gradient fed to backward
  NAME/y                   forward output
  NAME/gx, NAME/gw, NAME/gb  gradients of sum(y * seed)
  NAME/idx                 max_pool2d only: the int64 indices

The case table is stored as JSON in the metadata ("cases"); the Go test
(op/conv_ref_test.go) builds each op from it, so the two cannot drift.
"""

import json
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from st import save  # noqa: E402  (shared safetensors writer)

OUT = os.path.normpath(os.path.join(HERE, "..", "..", "op", "testdata", "conv.safetensors"))


def conv(name, x, w, bias=True, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    return dict(name=name, op="conv2d", x=list(x), w=list(w), bias=bias, stride=list(stride),
                padding=list(padding), dilation=list(dilation), groups=groups)


def maxpool(name, x, kernel, stride=None, padding=(0, 0), dilation=(1, 1), ceil_mode=False, fill="randn"):
    """fill: "randn", "ints" (small integers, so windows have ties) or "nan"
    (randn with NaNs, which max pooling propagates)."""
    return dict(name=name, op="max_pool2d", x=list(x), kernel=list(kernel),
                stride=list(stride) if stride else None, padding=list(padding),
                dilation=list(dilation), ceil_mode=ceil_mode, fill=fill)


def avgpool(name, x, kernel, stride=None, padding=(0, 0), ceil_mode=False, count_include_pad=True,
            divisor_override=None):
    return dict(name=name, op="avg_pool2d", x=list(x), kernel=list(kernel),
                stride=list(stride) if stride else None, padding=list(padding), ceil_mode=ceil_mode,
                count_include_pad=count_include_pad, divisor_override=divisor_override)


def adaptive(name, x, size):
    return dict(name=name, op="adaptive_avg_pool2d", x=list(x), size=list(size))


def upsample(name, x, scale_factor=None, size=None):
    return dict(name=name, op="upsample_nearest2d", x=list(x), scale_factor=scale_factor,
                size=list(size) if size else None)


CASES = [
    conv("conv_basic", (2, 3, 7, 8), (4, 3, 3, 3)),
    conv("conv_stride2_pad1", (2, 3, 9, 10), (5, 3, 3, 3), stride=(2, 2), padding=(1, 1)),
    conv("conv_dilation2_nobias", (2, 3, 9, 9), (4, 3, 3, 3), bias=False, padding=(2, 2), dilation=(2, 2)),
    conv("conv_groups2", (2, 4, 6, 6), (6, 2, 3, 3), padding=(1, 1), groups=2),
    conv("conv_depthwise", (2, 4, 7, 7), (4, 1, 3, 3), bias=False, padding=(1, 1), groups=4),
    conv("conv_depthwise_mult_stride2", (2, 4, 8, 8), (8, 1, 3, 3), stride=(2, 2), padding=(1, 1), groups=4),
    conv("conv_nonsquare", (1, 3, 8, 9), (4, 3, 3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
    conv("conv_pointwise", (2, 6, 5, 4), (3, 6, 1, 1)),
    conv("conv_pointwise_stride2", (2, 6, 5, 5), (3, 6, 1, 1), bias=False, stride=(2, 2)),
    conv("conv_kernel_equals_input", (2, 3, 5, 5), (2, 3, 5, 5)),
    conv("conv_7x7_stride2_pad3", (1, 3, 16, 16), (8, 3, 7, 7), bias=False, stride=(2, 2), padding=(3, 3)),
    conv("conv_wide", (2, 16, 12, 12), (32, 16, 3, 3), padding=(1, 1)),
    conv("conv_unbatched", (3, 6, 6), (4, 3, 3, 3), padding=(1, 1)),
    maxpool("max_k2", (2, 3, 8, 8), (2, 2)),
    maxpool("max_k3_s2_p1", (2, 3, 9, 9), (3, 3), stride=(2, 2), padding=(1, 1)),
    maxpool("max_k3_s2_ceil", (1, 2, 8, 8), (3, 3), stride=(2, 2), ceil_mode=True),
    maxpool("max_k2_p1_ceil", (1, 2, 5, 5), (2, 2), padding=(1, 1), ceil_mode=True),
    maxpool("max_dilation2", (1, 2, 9, 10), (3, 3), stride=(1, 1), padding=(1, 1), dilation=(2, 2)),
    maxpool("max_nonsquare", (2, 2, 7, 6), (3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True),
    maxpool("max_ties", (2, 2, 6, 6), (3, 3), stride=(1, 1), padding=(1, 1), fill="ints"),
    maxpool("max_nan", (1, 2, 6, 6), (3, 3), stride=(2, 2), padding=(1, 1), fill="nan"),
    maxpool("max_unbatched", (3, 6, 6), (2, 2)),
    avgpool("avg_k2", (2, 3, 8, 8), (2, 2)),
    avgpool("avg_k3_s2_p1", (2, 3, 9, 9), (3, 3), stride=(2, 2), padding=(1, 1)),
    avgpool("avg_k3_s2_p1_exclude_pad", (2, 3, 9, 9), (3, 3), stride=(2, 2), padding=(1, 1), count_include_pad=False),
    avgpool("avg_k3_s2_ceil", (1, 2, 8, 8), (3, 3), stride=(2, 2), ceil_mode=True),
    avgpool("avg_ceil_pad", (1, 2, 6, 7), (3, 3), stride=(2, 2), padding=(1, 1), ceil_mode=True),
    avgpool("avg_ceil_pad_exclude", (1, 2, 6, 7), (3, 3), stride=(2, 2), padding=(1, 1), ceil_mode=True,
            count_include_pad=False),
    avgpool("avg_nonsquare", (2, 2, 6, 7), (3, 2), stride=(1, 2), padding=(1, 1)),
    avgpool("avg_divisor_override", (1, 2, 5, 5), (2, 2), stride=(1, 1), divisor_override=3),
    adaptive("adaptive_1x1", (2, 8, 7, 7), (1, 1)),
    adaptive("adaptive_divisible", (2, 3, 6, 8), (3, 4)),
    adaptive("adaptive_nondivisible", (2, 3, 7, 9), (3, 4)),
    adaptive("adaptive_larger", (1, 2, 4, 3), (6, 5)),
    adaptive("adaptive_nonsquare_to_1", (1, 3, 5, 3), (1, 2)),
    upsample("nearest_x2", (2, 3, 4, 5), scale_factor=2),
    upsample("nearest_x3", (1, 2, 3, 4), scale_factor=3),
    upsample("nearest_x4", (1, 2, 3, 3), scale_factor=4),
    upsample("nearest_size_up", (1, 2, 5, 7), size=(8, 11)),
    upsample("nearest_size_down", (1, 2, 7, 9), size=(3, 4)),
]


def run(c, out):
    name = c["name"]
    fill = c.get("fill", "randn")
    if fill == "ints":
        x = torch.randint(0, 3, c["x"]).float()
    else:
        x = torch.randn(c["x"])
    if fill == "nan":
        x[0, 0, 1, 1] = float("nan")
        x[0, 0, 1, 2] = float("nan")  # two NaNs in one window: the last wins
        x[0, 1, 4, 3] = float("nan")
    x.requires_grad_(True)
    leaves = {"x": x}
    if c["op"] == "conv2d":
        w = torch.randn(c["w"]).requires_grad_(True)
        leaves["w"] = w
        b = None
        if c["bias"]:
            b = torch.randn(c["w"][0]).requires_grad_(True)
            leaves["b"] = b
        y = F.conv2d(x, w, b, c["stride"], c["padding"], c["dilation"], c["groups"])
    elif c["op"] == "max_pool2d":
        y, idx = F.max_pool2d(x, c["kernel"], c["stride"], c["padding"], c["dilation"],
                              ceil_mode=c["ceil_mode"], return_indices=True)
        out[name + "/idx"] = idx
    elif c["op"] == "avg_pool2d":
        y = F.avg_pool2d(x, c["kernel"], c["stride"], c["padding"], ceil_mode=c["ceil_mode"],
                         count_include_pad=c["count_include_pad"], divisor_override=c["divisor_override"])
    elif c["op"] == "adaptive_avg_pool2d":
        y = F.adaptive_avg_pool2d(x, c["size"])
    elif c["op"] == "upsample_nearest2d":
        if c["scale_factor"]:
            y = F.interpolate(x, scale_factor=c["scale_factor"], mode="nearest")
        else:
            y = F.interpolate(x, size=c["size"], mode="nearest")
    else:
        raise ValueError(c["op"])
    seed = torch.randn(y.shape)
    y.backward(seed)
    for k, t in leaves.items():
        out[f"{name}/{k}"] = t.detach()
        out[f"{name}/g{k}"] = t.grad
    out[name + "/seed"] = seed
    out[name + "/y"] = y.detach().contiguous()


def main():
    torch.manual_seed(20240601)
    torch.set_num_threads(1)
    out = {}
    for c in CASES:
        run(c, out)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    save(OUT, out, metadata={"torch": torch.__version__, "cases": json.dumps(CASES)})
    print(f"wrote {len(out)} tensors for {len(CASES)} cases to {OUT}")


if __name__ == "__main__":
    main()
