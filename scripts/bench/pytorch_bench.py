#!/usr/bin/python3
"""The PyTorch side of `headroom bench --compare-pytorch`.

Measures one standard workload (internal/bench/workload.go) in this process,
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

    /usr/bin/python3 scripts/bench/pytorch_bench.py --workload resnet18 --threads 2

The models match headroom's zoo package (zoo/mlp.go, zoo/resnet.go via
torchvision, zoo/gpt.go, zoo/rrdbnet.go); GPT and RRDBNet are the
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
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
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
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    res = dict(workload=args.workload, engine="pytorch", version=torch.__version__,
               threads=torch.get_num_threads(), warmup=args.warmup, step_seconds=[], loss=0.0)
    try:
        run(args, res)
    except Exception as e:  # report, do not hide
        res["error"] = "%s: %s" % (type(e).__name__, e)
        print(PREFIX + json.dumps(res), flush=True)
        raise
    print(PREFIX + json.dumps(res), flush=True)


def run(args, res):
    if args.workload == "sgemm":
        return run_sgemm(args, res)
    model, inputs, loss_fn, batch = build(args.workload)
    # A fresh batch every step, as headroom does (a model fitting one batch
    # would drive its gradients to subnormal floats).
    batches = [inputs() for _ in range(args.warmup + args.steps)]
    res.update(batch=batch, work=float(batch), unit="samples")
    opt = torch.optim.Adam(model.parameters())
    model.train()

    gc.collect()
    res["rss_before"], _ = memory()
    res["peak_reset"] = reset_peak()

    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        x, y = batches[i]
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


def build(name):
    """(model, a function returning one random batch (x, y), loss, batch size)."""
    if name == "mlp":
        model = MLP(784, 1024, 1024, 10)
        return model, lambda: (torch.randn(128, 784), torch.randint(0, 10, (128,))), F.cross_entropy, 128
    if name == "resnet18":
        model = torchvision.models.resnet18(num_classes=10)
        return model, lambda: (torch.randn(32, 3, 64, 64), torch.randint(0, 10, (32,))), F.cross_entropy, 32
    if name == "resnet152":
        model = torchvision.models.resnet152(num_classes=100)
        return model, lambda: (torch.randn(8, 3, 128, 128), torch.randint(0, 100, (8,))), F.cross_entropy, 8
    if name == "gpt":
        cfg = dict(n_layer=6, n_head=6, n_embd=384, block_size=256, vocab_size=256, dropout=0.0, bias=True)
        model = GPT(cfg)
        return model, lambda: (torch.randint(0, 256, (8, 256)), torch.randint(0, 256, (8, 256))), gpt_loss, 8
    if name == "rrdbnet":
        model = RRDBNet(3, 3, 64, 23, 32)
        return model, lambda: (torch.randn(4, 3, 32, 32), torch.randn(4, 3, 128, 128)), F.l1_loss, 4
    raise SystemExit("pytorch_bench.py: unknown workload %r" % name)


# ------------------------------------------------------------------ models

class MLP(nn.Sequential):
    """zoo.NewMLP: Linear, ReLU, ..., Linear (parameter names 0.*, 2.*, 4.*)."""

    def __init__(self, *widths):
        layers = []
        for i in range(len(widths) - 1):
            layers.append(nn.Linear(widths[i], widths[i + 1]))
            if i + 2 < len(widths):
                layers.append(nn.ReLU())
        super().__init__(*layers)


if __name__ == "__main__":
    main()
