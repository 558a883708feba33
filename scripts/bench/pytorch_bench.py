#!/usr/bin/python3
"""The PyTorch side of `headroom bench --compare-pytorch`.

Measures one workload (internal/bench/workload.go: a model of headroom's zoo
registry, zoo/registry.go, at a batch size) in this process,
exactly as headroom measures its own: Adam with PyTorch's defaults, float32,
random inputs; --warmup untimed steps, then --steps timed ones (wall-clock
time of zero_grad, forward, loss, backward and optimizer step); resident
memory (VmRSS) sampled just before the first step, when the parameters and
the input batch exist (PyTorch creates gradients and Adam's state during the
first step), the peak (VmHWM) reset there through /proc/self/clear_refs and
read after the last step. It prints one line

    @@headroom-bench {json}

with the fields of bench.Result (internal/bench/result.go); progress goes to
standard error. Run it with Debian's interpreter, which has torch 1.13 and
torchvision (install libopenblas0-pthread, or torch's matrix products run on
the reference BLAS):

    /usr/bin/python3 scripts/bench/pytorch_bench.py --workload resnet18 \
        --model resnet18-64 --x f32:32,3,64,64 --y i64:32 --classes 10 --threads 2

headroom passes the zoo model's name and the shapes of one batch (from its
registry), so this script only knows how to build each zoo model in PyTorch
(MODELS below, a test checks that every zoo name is there): zoo/mlp.go,
zoo/cnn.go, zoo/resnet.go via torchvision, zoo/gpt.go, zoo/rrdbnet.go. With
--precision bf16-mixed each step's forward pass and loss run under
torch.autocast("cpu", dtype=torch.bfloat16); with --precision bf16-true
(Lightning's "bf16-true") the model is model.to(torch.bfloat16), the
floating inputs and targets are bfloat16, and Adam updates the bfloat16
parameters (its state bfloat16 too). GPT and RRDBNet are the
definitions of scripts/reference/torch_models.py, which the zoo's parity tests
check headroom against. PyTorch 1.13 has no fused attention, so GPT runs
nanoGPT's explicit path (softmax of masked scores), as nanoGPT itself does
on PyTorch < 2.
"""

import argparse
import gc
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

# GPT and RRDBNet are the definitions the zoo's parity tests check against.
# `headroom bench` writes torch_models.py next to this script (both are
# embedded in the binary); in the repository it is in scripts/reference.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _here)
sys.path.insert(0, os.path.join(_here, "..", "reference"))
from torch_models import GPT, RRDBNet, gpt_loss  # noqa: E402

PREFIX = "@@headroom-bench "


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def memory():
    """(VmRSS, VmHWM) of this process in bytes."""
    rss = hwm = None
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                n = int(v.split()[0]) * 1024
                if k == "VmRSS":
                    rss = n
                else:
                    hwm = n
    return rss, hwm


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    rss, hwm = memory()
    return hwm <= rss + (64 << 10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", required=True)
    ap.add_argument("--model", help="zoo model name (required but for sgemm)")
    ap.add_argument("--x", help="inputs of one batch: f32|i64:DIM,DIM,...")
    ap.add_argument("--y", help="targets of one batch: f32|i64:DIM,DIM,...")
    ap.add_argument("--classes", type=int, default=0, help="range of integer inputs and targets")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16-mixed", "bf16-true"])
    ap.add_argument("--openblas-core", action="store_true",
                    help="print the OpenBLAS core (OPENBLAS_VERBOSE=2 makes OpenBLAS say it) and exit")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    if args.openblas_core:
        # OpenBLAS prints "Core: <name>" when it loads (with OPENBLAS_VERBOSE=2
        # in the environment); one small product makes sure it is loaded.
        torch.mm(torch.ones(8, 8), torch.ones(8, 8))
        print(torch.__config__.show(), file=sys.stderr, flush=True)
        # Which BLAS library the process loaded: Debian's torch links the
        # generic libblas.so.3, which the alternatives system may point at
        # the slow reference implementation.
        lib = blas_library()
        if lib:
            print("BLAS library: " + lib, file=sys.stderr, flush=True)
        return
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    res = dict(workload=args.workload, engine="pytorch", version=torch.__version__, precision=args.precision,
               threads=torch.get_num_threads(), warmup=args.warmup, step_seconds=[], loss=0.0)
    try:
        run(args, res)
    except Exception as e:  # report, do not hide
        res["error"] = "%s: %s" % (type(e).__name__, e)
        print(PREFIX + json.dumps(res), flush=True)
        raise
    print(PREFIX + json.dumps(res), flush=True)


def blas_library():
    """The file of the BLAS whose sgemm torch calls (symlinks resolved), or
    None: dlsym from libtorch_cpu's handle follows torch's own dependency
    order, which a list of mapped libraries cannot tell (Debian's liblapack
    may map OpenBLAS while sgemm comes from the reference libblas)."""
    import ctypes

    class DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]
    try:
        with open("/proc/self/maps") as f:
            torch_cpu = next(l.split()[-1] for l in f if "libtorch_cpu" in l)
        h = ctypes.CDLL(torch_cpu, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        info = DlInfo()
        if ctypes.CDLL("libc.so.6").dladdr(ctypes.cast(h.sgemm_, ctypes.c_void_p), ctypes.byref(info)) == 0:
            return None
        return os.path.realpath(info.dli_fname.decode())
    except (OSError, StopIteration, AttributeError):
        return None


def run(args, res):
    if args.workload == "sgemm":
        return run_sgemm(args, res)
    model, inputs, loss_fn, batch = build(args)
    # A fresh batch every step, as headroom does (a model fitting one batch
    # would drive its gradients to subnormal floats).
    batches = [inputs() for _ in range(args.warmup + args.steps)]
    if args.precision == "bf16-true":
        model.to(torch.bfloat16)
        batches = [tuple(t.to(torch.bfloat16) if t.is_floating_point() else t for t in b) for b in batches]
    res.update(batch=batch, work=float(batch), unit="samples")
    opt = torch.optim.Adam(model.parameters())
    model.train()

    gc.collect()
    res["rss_before"], _ = memory()
    res["peak_reset"] = reset_peak()

    bf16 = args.precision == "bf16-mixed"
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        x, y = batches[i]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        lv = loss.item()
        d = time.perf_counter() - t0
        res["loss"] = lv
        if i >= args.warmup:
            res["step_seconds"].append(d)
            log("  %s pytorch step %d/%d: %.1fms (loss %.4f)" % (args.workload, i - args.warmup + 1, args.steps, d * 1e3, lv))
        else:
            log("  %s pytorch warm-up %d/%d: %.1fms (loss %.4f)" % (args.workload, i + 1, args.warmup, d * 1e3, lv))
    _, res["rss_peak"] = memory()


def run_sgemm(args, res):
    n = 1024
    res.update(batch=1, work=2.0 * n * n * n, unit="flop")
    a, b = torch.rand(n, n) - 0.5, torch.rand(n, n) - 0.5
    c = torch.empty(n, n)
    res["rss_before"], _ = memory()
    res["peak_reset"] = reset_peak()
    reps = 8  # bench.GEMMReps: a step is 8 products, timed per product
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=c)
        d = (time.perf_counter() - t0) / reps
        if i >= args.warmup:
            res["step_seconds"].append(d)
    _, res["rss_peak"] = memory()
    res["loss"] = float(c[0, 0])
    med = sorted(res["step_seconds"])[len(res["step_seconds"]) // 2]
    log("  sgemm pytorch: median %.2fms (%.1f GFLOP/s)" % (med * 1e3, res["work"] / med / 1e9))


# ------------------------------------------------------------------ workloads


def parse_meta(s):
    """"f32:8,3,32,32" -> (dtype, shape)."""
    dt, _, dims = s.partition(":")
    dtype = {"f32": torch.float32, "i64": torch.int64}[dt]
    return dtype, [int(d) for d in dims.split(",")]


def random_tensor(meta, classes):
    dtype, shape = meta
    if dtype == torch.int64:
        return torch.randint(0, classes, shape)
    return torch.randn(*shape)


def build(args):
    """(model, a function returning one random batch (x, y), loss, batch size)."""
    if args.model not in MODELS:
        raise SystemExit("pytorch_bench.py: no PyTorch definition of zoo model %r" % args.model)
    xm, ym = parse_meta(args.x), parse_meta(args.y)
    model = MODELS[args.model](args.classes)
    # The loss follows from the data, as zoo.NewSynthetic tells the kinds
    # apart: tokens in (language model), images out (image to image), else a
    # classifier.
    if xm[0] == torch.int64:
        loss_fn = gpt_loss
    elif ym[0] == torch.float32:
        loss_fn = F.l1_loss
    else:
        loss_fn = F.cross_entropy
    return model, lambda: (random_tensor(xm, args.classes), random_tensor(ym, args.classes)), loss_fn, xm[1][0]


def gpt(n_layer, n_head, n_embd, block_size, vocab_size, dropout, bias):
    return GPT(dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                    vocab_size=vocab_size, dropout=dropout, bias=bias))


_tv = torchvision.models

# The zoo's models by registry name (zoo/registry.go, zoo/bench.go), given
# the number of classes (a language model's vocabulary).
MODELS = {
    "mlp": lambda c: MLP(784, 256, c),
    "mlp-1024": lambda c: MLP(784, 1024, 1024, c),
    "cnn": lambda c: FashionCNN(c),
    "resnet18": lambda c: _tv.resnet18(num_classes=c),
    "resnet34": lambda c: _tv.resnet34(num_classes=c),
    "resnet50": lambda c: _tv.resnet50(num_classes=c),
    "resnet101": lambda c: _tv.resnet101(num_classes=c),
    "resnet152": lambda c: _tv.resnet152(num_classes=c),
    "resnet18-64": lambda c: _tv.resnet18(num_classes=c),
    "resnet152-128": lambda c: _tv.resnet152(num_classes=c),
    "gpt2": lambda c: gpt(12, 12, 768, 1024, c, 0.0, True),
    "gpt-shakespeare-char": lambda c: gpt(6, 6, 384, 256, c, 0.2, False),
    "gpt-bytes": lambda c: gpt(6, 6, 384, 256, c, 0.0, True),
    "rrdbnet": lambda c: RRDBNet(3, 3, 64, 23, 32),
}


# ------------------------------------------------------------------ models

class MLP(nn.Sequential):
    """zoo.NewMLP: Flatten, Linear, ReLU, ..., Linear (parameter names 1.*, 3.*, ...)."""

    def __init__(self, *widths):
        layers = [nn.Flatten()]
        for i in range(len(widths) - 1):
            layers.append(nn.Linear(widths[i], widths[i + 1]))
            if i + 2 < len(widths):
                layers.append(nn.ReLU())
        super().__init__(*layers)


class FashionCNN(nn.Module):
    """zoo.NewFashionCNN (zoo/cnn.go)."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


if __name__ == "__main__":
    main()
