#!/usr/bin/python3
"""Reference data for package zoo, produced by PyTorch 1.13 and torchvision.

Run with Debian's interpreter (the one that has torch and torchvision):

    /usr/bin/python3 scripts/reference/zoo_ref.py

It writes into zoo/testdata/:

  architectures.json      for each full-size architecture (ResNet-18/-34/-50/
                          -101/-152, nanoGPT's GPT-2 124M, ESRGAN's RRDBNet):
                          the state_dict keys with dtype and shape, in order,
                          and sum(p.numel() for p in model.parameters())
  <case>.safetensors      a small configuration: its output in evaluation
                          mode, and one training step: inputs, loss,
                          gradients, running statistics after the forward
                          pass, and the weights after one SGD step and
                          after one AdamW step from the same start

Weights are not stored. Both this script and the Go test generate them with
the same integer hash ("hashinit" below), so the files stay small even for
ResNet-18's 11M parameters:

  key  = FNV-1a 64 of the parameter's state_dict name
  z_i  = splitmix64(key + (i+1) * 0x9E3779B97F4A7C15), i the flat index
  u_i  = 2 * (z_i >> 40) / 2^24 - 1           exactly representable, in [-1, 1)
  w_i  = float32(center + float64(scale * u_i))

with (center, scale) chosen by the parameter's role (see hash_role). Every
step is exact or a single correctly rounded float64 operation, so Go and
numpy produce the same bits. The file carries, per tensor, the sum of the
generated values so the Go test can tell a generator mismatch from a model
mismatch.

Large tensors are stored in part: a tensor with at most FULL_MAX elements
(4096 for rrdbnet) is stored whole under "<kind>/<name>"; a larger one as
"<kind>_sample/<name>" (its values at SAMPLE_K evenly spaced flat indices
(j * n) // SAMPLE_K) plus "<kind>_stats/<name>" = float64 [sum, l2 norm,
max |x|, sum |x|]. kind is grad, sgd or adamw. The Go test measures error as
max|a - b| / max|b| over a tensor, taking max|b| from the stats when only
samples are stored. "z_i" above is the (i+1)-th output of a splitmix64
generator seeded with key.
"""

import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from st import save  # noqa: E402  (shared safetensors writer)

OUT = os.path.normpath(os.path.join(HERE, "..", "..", "zoo", "testdata"))

FULL_MAX = 10000
SAMPLE_K = 64
SGD = dict(lr=0.1, momentum=0.9)
ADAMW = dict()  # torch defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2

# ------------------------------------------------------------------ hashinit

_M64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode("utf-8"):
        h ^= b
        h = (h * 0x100000001B3) & _M64
    return h


def hash_uniform(name, n):
    """n values in [-1, 1) (float64, each a multiple of 2^-23)."""
    with np.errstate(over="ignore"):
        i = np.arange(1, n + 1, dtype=np.uint64)
        z = np.uint64(fnv1a64(name)) + i * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.float64) * (2.0 / 16777216.0) - 1.0


def hash_role(name, shape):
    """(center, scale) of a parameter or buffer by its role."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "running_mean":
        return 0.0, 0.1
    if leaf == "running_var":
        return 1.0, 0.5
    if len(shape) >= 2:
        fan_in = int(np.prod(shape[1:]))
        return 0.0, 1.0 / math.sqrt(fan_in)
    if leaf == "weight":  # norm layers
        return 1.0, 0.2
    return 0.0, 0.1  # biases


def hash_tensor(name, shape, center, scale):
    n = int(np.prod(shape)) if len(shape) else 1
    u = hash_uniform(name, n)
    v = center + scale * u  # numpy float64: one rounding each, no fusion
    return torch.from_numpy(v.astype(np.float32).reshape(shape))


def hash_init(model):
    """Overwrite every floating-point parameter and buffer; returns the sums."""
    sums = {}
    sd = model.state_dict(keep_vars=True)
    seen = set()
    with torch.no_grad():
        for name, t in sd.items():
            if not t.dtype.is_floating_point or id(t) in seen:
                continue
            seen.add(id(t))
            c, s = hash_role(name, tuple(t.shape))
            v = hash_tensor(name, tuple(t.shape), c, s)
            t.copy_(v)
            sums[name] = float(v.double().sum())
    return sums


# ------------------------------------------------------------------ models

from torch_models import GPT, RRDBNet, gpt_loss  # noqa: E402,F401  (shared with the benchmark)


def resnet(block, layers, num_classes):
    blk = {"basic": torchvision.models.resnet.BasicBlock, "bottleneck": torchvision.models.resnet.Bottleneck}[block]
    return torchvision.models.resnet.ResNet(blk, layers, num_classes=num_classes)


# ------------------------------------------------------------------ architectures

GPT2 = dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304, dropout=0.0, bias=True)

ARCHS = {
    "resnet18": lambda: torchvision.models.resnet18(),
    "resnet34": lambda: torchvision.models.resnet34(),
    "resnet50": lambda: torchvision.models.resnet50(),
    "resnet101": lambda: torchvision.models.resnet101(),
    "resnet152": lambda: torchvision.models.resnet152(),
    "resnet18_c10": lambda: torchvision.models.resnet18(num_classes=10),
    "gpt2": lambda: GPT(GPT2),
    "gpt2_nobias": lambda: GPT(dict(GPT2, bias=False)),
    "rrdbnet": lambda: RRDBNet(3, 3, 64, 23, 32),
}

EXPECTED_COUNTS = {"resnet18": 11689512, "resnet50": 25557032, "resnet152": 60192808, "rrdbnet": 16697987}

_DT = {torch.float32: "F32", torch.int64: "I64"}


def architectures():
    out = {}
    for name, make in ARCHS.items():
        torch.manual_seed(0)
        m = make()
        n = sum(p.numel() for p in m.parameters())
        if name in EXPECTED_COUNTS:
            assert n == EXPECTED_COUNTS[name], (name, n)
        sd = m.state_dict()
        out[name] = dict(
            num_params=n,
            state_dict=[[k, _DT[v.dtype], list(v.shape)] for k, v in sd.items()],
        )
        print(f"{name}: {n:,} parameters, {len(sd)} state_dict entries")
        del m, sd
    return out


def write_architectures(path, archs):
    """JSON with one state_dict entry per line, so that diffs stay readable."""
    lines = ["{"]
    for i, name in enumerate(sorted(archs)):
        a = archs[name]
        lines.append(f'"{name}": {{"num_params": {a["num_params"]}, "state_dict": [')
        sd = a["state_dict"]
        for j, e in enumerate(sd):
            lines.append(json.dumps(e, separators=(",", ":")) + ("," if j + 1 < len(sd) else ""))
        lines.append("]}" + ("," if i + 1 < len(archs) else ""))
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    json.load(open(path))  # well-formed


# ------------------------------------------------------------------ one training step


def sample_idx(n):
    return [(j * n) // SAMPLE_K for j in range(SAMPLE_K)]


def put(tensors, kind, name, t, full_max):
    t = t.detach().contiguous()
    n = t.numel()
    if n <= full_max:
        tensors[f"{kind}/{name}"] = t.clone()
        return
    flat = t.reshape(-1)
    tensors[f"{kind}_sample/{name}"] = flat[sample_idx(n)].clone()
    d = flat.double()
    tensors[f"{kind}_stats/{name}"] = torch.tensor(
        [float(d.sum()), float(d.norm()), float(d.abs().max()), float(d.abs().sum())], dtype=torch.float64)


def hash_input(name, shape, scale=1.0):
    return hash_tensor(name, shape, 0.0, scale)


def hash_labels(name, shape, classes):
    n = int(np.prod(shape))
    u = hash_uniform(name, n)  # [-1, 1)
    k = np.floor((u + 1.0) * 0.5 * classes).astype(np.int64)
    return torch.from_numpy(k.reshape(shape))


def kinks(make, x, y, margin=4.0, l1=False):
    """How many ReLU inputs (and, for an L1 loss, outputs against the
    target) lie within float32 rounding of their kink.

    Such an element has no determined sign: a correct engine that sums in
    another order may let its gradient through where PyTorch blocked it, or
    the reverse, and on a small input one element's contribution moves every
    earlier layer's gradient by percents. The float64 model gives the values
    and, against the float32 one, each layer's float32 error; an element
    within `margin` times that error of zero counts."""

    def run(dt):
        torch.manual_seed(0)
        m = make()
        hash_init(m)
        m = m.to(dt).train()
        zs = []
        hs = [mod.register_forward_pre_hook(lambda mod, inp: zs.append(inp[0].double().clone()))
              for mod in m.modules() if isinstance(mod, nn.ReLU)]
        with torch.no_grad():
            out = m(x.to(dt)).double()
        for h in hs:
            h.remove()
        if l1:
            zs.append(out - y.double())
        return zs

    n = 0
    for z32, z64 in zip(run(torch.float32), run(torch.float64)):
        err = float((z32 - z64).abs().max())
        n += int((z64.abs() <= margin * err).sum())
    return n


def kink_free_input(make, shape, y, make_input, l1=False):
    """The first of make_input(name) for name = input, input.1, input.2, ...
    with no element at a kink (see kinks); returns it and its name."""
    for i in range(200):
        name = "input" if i == 0 else f"input.{i}"
        x = make_input(name, shape)
        if kinks(make, x, y, l1=l1) == 0:
            return x, name
    raise SystemExit("no kink-free input in 200 draws")


def one_step(case, make, x, y, loss_fn, meta, full_max=FULL_MAX):
    tensors = {"x": x, "y": y}
    names = []

    def fresh():
        torch.manual_seed(0)
        m = make()
        sums = hash_init(m)
        m.train()
        return m, sums

    m, sums = fresh()
    m.eval()  # evaluation mode first: running statistics, no dropout
    with torch.no_grad():
        tensors["eval_out"] = m(x).clone()
    m.train()
    sd = m.state_dict()
    meta["state_dict"] = [[k, _DT[v.dtype], list(v.shape)] for k, v in sd.items()]
    meta["params"] = [k for k, _ in m.named_parameters()]
    meta["num_params"] = sum(p.numel() for p in m.parameters())
    meta["init_sums"] = sums

    out = m(x)
    loss = loss_fn(out, y)
    loss.backward()
    tensors["loss"] = loss.detach().reshape(()).clone()
    for k, p in m.named_parameters():
        put(tensors, "grad", k, p.grad, full_max)
        names.append(k)
    for k, b in m.named_buffers():
        tensors[f"buffer/{k}"] = b.detach().clone()
    opt = torch.optim.SGD(m.parameters(), foreach=False, **SGD)
    opt.step()
    for k, p in m.named_parameters():
        put(tensors, "sgd", k, p, full_max)

    m, _ = fresh()
    loss2 = loss_fn(m(x), y)
    loss2.backward()
    assert float(loss2) == float(loss)
    opt = torch.optim.AdamW(m.parameters(), foreach=False, **ADAMW)
    opt.step()
    for k, p in m.named_parameters():
        put(tensors, "adamw", k, p, full_max)

    meta.update(full_max=full_max, sample_k=SAMPLE_K, sgd=SGD, adamw=ADAMW)
    path = os.path.join(OUT, case + ".safetensors")
    save(path, tensors, metadata={"case": json.dumps(meta, sort_keys=True)})
    print(f"{case}: loss {float(loss):.6f}, {meta['num_params']:,} parameters, "
          f"{os.path.getsize(path):,} bytes")


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    write_architectures(os.path.join(OUT, "architectures.json"), architectures())

    # ResNet-18, full architecture, 10 classes, train mode (batch statistics).
    x = hash_input("input", (2, 3, 64, 48))
    y = hash_labels("target", (2,), 10)
    one_step("resnet18", lambda: resnet("basic", [2, 2, 2, 2], 10), x, y, F.cross_entropy,
             dict(model="resnet", block="basic", layers=[2, 2, 2, 2], num_classes=10))

    # A ResNet with one Bottleneck per stage (exercises the Bottleneck path).
    x = hash_input("input", (3, 3, 40, 32))
    y = hash_labels("target", (3,), 7)
    one_step("resnet_bottleneck", lambda: resnet("bottleneck", [1, 1, 1, 1], 7), x, y, F.cross_entropy,
             dict(model="resnet", block="bottleneck", layers=[1, 1, 1, 1], num_classes=7))

    # nanoGPT, small; T < block_size; a few targets ignored (-1).
    cfg = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64, dropout=0.0, bias=True)
    x = hash_labels("input", (2, 12), cfg["vocab_size"])
    y = hash_labels("target", (2, 12), cfg["vocab_size"])
    y[0, 3] = -1
    y[1, 11] = -1
    one_step("gpt", lambda: GPT(cfg), x, y, gpt_loss, dict(model="gpt", config=cfg))

    cfg_nb = dict(cfg, bias=False, n_layer=1, n_head=4)
    one_step("gpt_nobias", lambda: GPT(cfg_nb), x, y, gpt_loss, dict(model="gpt", config=cfg_nb))

    # RRDBNet, small: nb=2, nf=16, gc=8; L1 loss against a x4 target.
    rc = dict(in_nc=3, out_nc=3, nf=16, nb=2, gc=8)
    x = hash_input("input", (2, 3, 8, 12))
    y = hash_input("target", (2, 3, 32, 48))
    one_step("rrdbnet", lambda: RRDBNet(rc["in_nc"], rc["out_nc"], rc["nf"], rc["nb"], rc["gc"]), x, y,
             F.l1_loss, dict(model="rrdbnet", config=rc), full_max=4096)


if __name__ == "__main__":
    main()
