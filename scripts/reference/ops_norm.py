#!/usr/bin/python3
"""Reference values for headroom's normalization and embedding ops, produced
by PyTorch 1.13.

Run with Debian's interpreter (the one that has torch):

    /usr/bin/python3 scripts/reference/ops_norm.py

It writes op/testdata/norm.safetensors, read by op/norm_ref_test.go. Every
case stores its inputs, a random output gradient ("gy"), the forward output
("y") and the gradients of the inputs ("gx", "gw", "gb"); batch norm cases
also store the running statistics after every step and num_batches_tracked.
Tensor names are "<case>.<name>", with a step suffix for multi-step batch
norm runs ("bn_train_nchw.y1", "bn_train_nchw.running_mean2"). The case table
is stored as JSON in the metadata ("configs") so the Go test runs exactly
these cases.

Dropout is not here: its random stream cannot match PyTorch's, so it is
tested statistically in Go.
"""

import json
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from st import save  # noqa: E402  (shared safetensors writer)

OUT = os.path.normpath(os.path.join(HERE, "..", "..", "op", "testdata", "norm.safetensors"))

torch.set_num_threads(1)
GEN = torch.Generator().manual_seed(20240513)


def randn(*shape, scale=1.0, shift=0.0):
    return torch.randn(shape, generator=GEN, dtype=torch.float32) * scale + shift


def rand(*shape, lo=0.0, hi=1.0):
    return torch.rand(shape, generator=GEN, dtype=torch.float32) * (hi - lo) + lo


# name -> config. Batch norm configs: shape, affine, track (running stats),
# training, momentum, eps, steps.
BATCH_NORM = {
    "bn_train_nchw": dict(shape=[4, 3, 5, 6], affine=True, track=True, training=True, momentum=0.1, eps=1e-5, steps=2),
    "bn_train_nc": dict(shape=[8, 5], affine=True, track=True, training=True, momentum=0.3, eps=1e-3, steps=2),
    "bn_train_ncl": dict(shape=[3, 4, 7], affine=True, track=True, training=True, momentum=0.1, eps=1e-5, steps=2),
    "bn_train_noaffine": dict(shape=[2, 4, 3, 3], affine=False, track=True, training=True, momentum=0.2, eps=1e-5, steps=2),
    "bn_train_notrack": dict(shape=[5, 3, 2, 4], affine=True, track=False, training=True, momentum=0.1, eps=1e-5, steps=1),
    "bn_train_wide": dict(shape=[2, 6, 17, 19], affine=True, track=True, training=True, momentum=0.1, eps=1e-5, steps=2),
    "bn_eval_nchw": dict(shape=[3, 4, 2, 5], affine=True, track=True, training=False, momentum=0.1, eps=1e-5, steps=1),
    "bn_eval_nc": dict(shape=[6, 5], affine=True, track=True, training=False, momentum=0.1, eps=1e-3, steps=1),
    "bn_eval_noaffine": dict(shape=[2, 3, 4, 4], affine=False, track=True, training=False, momentum=0.1, eps=1e-5, steps=1),
}

LAYER_NORM = {
    "ln_last1": dict(shape=[4, 7, 10], normalized=[10], affine=True, eps=1e-5),
    "ln_last2": dict(shape=[3, 5, 6], normalized=[5, 6], affine=True, eps=1e-5),
    "ln_noaffine": dict(shape=[6, 12], normalized=[12], affine=False, eps=1e-6),
    "ln_wide": dict(shape=[4, 1000], normalized=[1000], affine=True, eps=1e-5),
    "ln_all": dict(shape=[3, 4], normalized=[3, 4], affine=True, eps=1e-5),
}

GROUP_NORM = {
    "gn_g1": dict(shape=[2, 6, 4, 5], groups=1, affine=True, eps=1e-5),
    "gn_g2": dict(shape=[2, 6, 4, 5], groups=2, affine=True, eps=1e-5),
    "gn_g3": dict(shape=[2, 6, 4, 5], groups=3, affine=True, eps=1e-5),
    "gn_g6": dict(shape=[2, 6, 4, 5], groups=6, affine=True, eps=1e-5),
    "gn_noaffine": dict(shape=[3, 4, 3, 3], groups=2, affine=False, eps=1e-5),
    "gn_ncl": dict(shape=[3, 8, 7], groups=4, affine=True, eps=1e-3),
    # Two values per group: gx is a near-total cancellation that float32
    # PyTorch computes to only ~1e-4 absolute, so this case also stores a
    # float64 reference ("gx64", from the same float32 inputs).
    "gn_nc": dict(shape=[5, 6], groups=3, affine=True, eps=1e-5, ref64=True),
}

EMBEDDING = {
    # indices drawn from [0, num) with repeats; padding_idx None or an int
    # (negative counts from the end, as in PyTorch).
    "emb_plain": dict(num=10, dim=4, indices_shape=[3, 5], padding_idx=None),
    "emb_padding": dict(num=7, dim=6, indices_shape=[4, 6], padding_idx=2),
    "emb_padding_neg": dict(num=5, dim=3, indices_shape=[12], padding_idx=-1),
    "emb_3d": dict(num=9, dim=8, indices_shape=[2, 3, 4], padding_idx=None),
}


def batch_norm_case(name, c, tensors):
    shape = c["shape"]
    ch = shape[1]
    cls = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d, 5: torch.nn.BatchNorm3d}[len(shape)]
    m = cls(ch, eps=c["eps"], momentum=c["momentum"], affine=c["affine"], track_running_stats=c["track"])
    with torch.no_grad():
        if c["affine"]:
            m.weight.copy_(randn(ch, scale=0.5, shift=1.0))
            m.bias.copy_(randn(ch, scale=0.5))
            tensors[f"{name}.weight"] = m.weight.detach().clone()
            tensors[f"{name}.bias"] = m.bias.detach().clone()
        if c["track"]:
            m.running_mean.copy_(randn(ch, scale=0.5))
            m.running_var.copy_(rand(ch, lo=0.5, hi=2.0))
            tensors[f"{name}.running_mean0"] = m.running_mean.clone()
            tensors[f"{name}.running_var0"] = m.running_var.clone()
    m.train(c["training"])
    for step in range(1, c["steps"] + 1):
        # Per-channel offsets and scales make mean subtraction matter.
        bshape = [1, ch] + [1] * (len(shape) - 2)
        x = randn(*shape) * rand(*bshape, lo=0.5, hi=3.0) + randn(*bshape, scale=2.0)
        gy = randn(*shape)
        x.requires_grad_(True)
        if c["affine"]:
            m.weight.grad = None
            m.bias.grad = None
        y = m(x)
        y.backward(gy)
        tensors[f"{name}.x{step}"] = x.detach()
        tensors[f"{name}.gy{step}"] = gy
        tensors[f"{name}.y{step}"] = y.detach()
        tensors[f"{name}.gx{step}"] = x.grad
        if c["affine"]:
            tensors[f"{name}.gw{step}"] = m.weight.grad.clone()
            tensors[f"{name}.gb{step}"] = m.bias.grad.clone()
        if c["track"]:
            tensors[f"{name}.running_mean{step}"] = m.running_mean.clone()
            tensors[f"{name}.running_var{step}"] = m.running_var.clone()
            tensors[f"{name}.num_batches_tracked{step}"] = m.num_batches_tracked.clone()


def layer_norm_case(name, c, tensors):
    shape, ns = c["shape"], c["normalized"]
    x = randn(*shape, scale=2.0, shift=0.7).requires_grad_(True)
    w = randn(*ns, scale=0.5, shift=1.0).requires_grad_(True) if c["affine"] else None
    b = randn(*ns, scale=0.5).requires_grad_(True) if c["affine"] else None
    gy = randn(*shape)
    y = F.layer_norm(x, ns, w, b, c["eps"])
    y.backward(gy)
    out = dict(x=x.detach(), gy=gy, y=y.detach(), gx=x.grad)
    if c["affine"]:
        out.update(weight=w.detach(), bias=b.detach(), gw=w.grad, gb=b.grad)
    tensors.update({f"{name}.{k}": v for k, v in out.items()})


def group_norm_case(name, c, tensors):
    shape = c["shape"]
    ch = shape[1]
    x = randn(*shape, scale=1.5, shift=-0.4).requires_grad_(True)
    w = randn(ch, scale=0.5, shift=1.0).requires_grad_(True) if c["affine"] else None
    b = randn(ch, scale=0.5).requires_grad_(True) if c["affine"] else None
    gy = randn(*shape)
    y = F.group_norm(x, c["groups"], w, b, c["eps"])
    y.backward(gy)
    out = dict(x=x.detach(), gy=gy, y=y.detach(), gx=x.grad)
    if c["affine"]:
        out.update(weight=w.detach(), bias=b.detach(), gw=w.grad, gb=b.grad)
    if c.get("ref64"):
        x64 = x.detach().double().requires_grad_(True)
        w64 = w.detach().double() if c["affine"] else None
        b64 = b.detach().double() if c["affine"] else None
        F.group_norm(x64, c["groups"], w64, b64, c["eps"]).backward(gy.double())
        out["gx64"] = x64.grad
    tensors.update({f"{name}.{k}": v for k, v in out.items()})


def embedding_case(name, c, tensors):
    num, dim = c["num"], c["dim"]
    w = randn(num, dim).requires_grad_(True)
    idx = torch.randint(0, num, c["indices_shape"], generator=GEN, dtype=torch.int64)
    pad = c["padding_idx"]
    if pad is not None:
        # Make sure the padding row is looked up (and repeated).
        flat = idx.view(-1)
        flat[0] = pad % num
        flat[-1] = pad % num
    gy = randn(*(c["indices_shape"] + [dim]))
    y = F.embedding(idx, w, padding_idx=pad)
    y.backward(gy)
    tensors.update({
        f"{name}.indices": idx,
        f"{name}.weight": w.detach(),
        f"{name}.gy": gy,
        f"{name}.y": y.detach(),
        f"{name}.gw": w.grad,
    })


def main():
    tensors = {}
    configs = {}
    for kind, table, fn in [
        ("batch_norm", BATCH_NORM, batch_norm_case),
        ("layer_norm", LAYER_NORM, layer_norm_case),
        ("group_norm", GROUP_NORM, group_norm_case),
        ("embedding", EMBEDDING, embedding_case),
    ]:
        for name, c in table.items():
            fn(name, c, tensors)
            configs[name] = dict(c, kind=kind)
    tensors = {k: v.detach().contiguous() for k, v in tensors.items()}
    meta = {"source": "scripts/reference/ops_norm.py", "torch": torch.__version__}
    save(OUT, tensors, dict(meta, configs=json.dumps(configs, sort_keys=True)))
    print(f"wrote {len(tensors)} tensors for {len(configs)} cases to {OUT}")


if __name__ == "__main__":
    main()
