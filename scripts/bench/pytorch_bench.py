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
definitions of scripts/reference/zoo_ref.py, which the zoo's parity tests
check headroom against. PyTorch 1.13 has no fused attention, so GPT runs
nanoGPT's explicit path (softmax of masked scores), as nanoGPT itself does
on PyTorch < 2.
"""

import argparse
import gc
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

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

class LayerNorm(nn.Module):
    """nanoGPT's LayerNorm: optional bias."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_attn = nn.Linear(cfg["n_embd"], 3 * cfg["n_embd"], bias=cfg["bias"])
        self.c_proj = nn.Linear(cfg["n_embd"], cfg["n_embd"], bias=cfg["bias"])
        self.attn_dropout = nn.Dropout(cfg["dropout"])
        self.resid_dropout = nn.Dropout(cfg["dropout"])
        self.n_head = cfg["n_head"]
        self.n_embd = cfg["n_embd"]
        bs = cfg["block_size"]
        self.register_buffer("bias", torch.tril(torch.ones(bs, bs)).view(1, 1, bs, bs), persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))

class GPTMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = nn.Linear(cfg["n_embd"], 4 * cfg["n_embd"], bias=cfg["bias"])
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg["n_embd"], cfg["n_embd"], bias=cfg["bias"])
        self.dropout = nn.Dropout(cfg["dropout"])

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))

class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = LayerNorm(cfg["n_embd"], bias=cfg["bias"])
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = LayerNorm(cfg["n_embd"], bias=cfg["bias"])
        self.mlp = GPTMLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x

class GPT(nn.Module):
    """Karpathy's nanoGPT GPT (model.py), forward returning logits [B, T, V]."""

    def __init__(self, cfg):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg["vocab_size"], cfg["n_embd"]),
            wpe=nn.Embedding(cfg["block_size"], cfg["n_embd"]),
            drop=nn.Dropout(cfg["dropout"]),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])]),
            ln_f=LayerNorm(cfg["n_embd"], bias=cfg["bias"]),
        ))
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg["n_layer"]))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        return self.lm_head(x)

def gpt_loss(logits, targets):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

class ResidualDenseBlock_5C(nn.Module):
    """ESRGAN's RRDBNet_arch.py (xinntao/ESRGAN), unchanged."""

    def __init__(self, nf=64, gc=32, bias=True):
        super().__init__()
        self.conv1 = nn.Conv2d(nf, gc, 3, 1, 1, bias=bias)
        self.conv2 = nn.Conv2d(nf + gc, gc, 3, 1, 1, bias=bias)
        self.conv3 = nn.Conv2d(nf + 2 * gc, gc, 3, 1, 1, bias=bias)
        self.conv4 = nn.Conv2d(nf + 3 * gc, gc, 3, 1, 1, bias=bias)
        self.conv5 = nn.Conv2d(nf + 4 * gc, nf, 3, 1, 1, bias=bias)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x):
        x1 = self.lrelu(self.conv1(x))
        x2 = self.lrelu(self.conv2(torch.cat((x, x1), 1)))
        x3 = self.lrelu(self.conv3(torch.cat((x, x1, x2), 1)))
        x4 = self.lrelu(self.conv4(torch.cat((x, x1, x2, x3), 1)))
        x5 = self.conv5(torch.cat((x, x1, x2, x3, x4), 1))
        return x5 * 0.2 + x

class RRDB(nn.Module):
    def __init__(self, nf, gc=32):
        super().__init__()
        self.RDB1 = ResidualDenseBlock_5C(nf, gc)
        self.RDB2 = ResidualDenseBlock_5C(nf, gc)
        self.RDB3 = ResidualDenseBlock_5C(nf, gc)

    def forward(self, x):
        out = self.RDB1(x)
        out = self.RDB2(out)
        out = self.RDB3(out)
        return out * 0.2 + x

class RRDBNet(nn.Module):
    def __init__(self, in_nc, out_nc, nf, nb, gc=32):
        super().__init__()
        self.conv_first = nn.Conv2d(in_nc, nf, 3, 1, 1, bias=True)
        self.RRDB_trunk = nn.Sequential(*[RRDB(nf, gc) for _ in range(nb)])
        self.trunk_conv = nn.Conv2d(nf, nf, 3, 1, 1, bias=True)
        self.upconv1 = nn.Conv2d(nf, nf, 3, 1, 1, bias=True)
        self.upconv2 = nn.Conv2d(nf, nf, 3, 1, 1, bias=True)
        self.HRconv = nn.Conv2d(nf, nf, 3, 1, 1, bias=True)
        self.conv_last = nn.Conv2d(nf, out_nc, 3, 1, 1, bias=True)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x):
        fea = self.conv_first(x)
        trunk = self.trunk_conv(self.RRDB_trunk(fea))
        fea = fea + trunk
        fea = self.lrelu(self.upconv1(F.interpolate(fea, scale_factor=2, mode="nearest")))
        fea = self.lrelu(self.upconv2(F.interpolate(fea, scale_factor=2, mode="nearest")))
        return self.conv_last(self.lrelu(self.HRconv(fea)))


if __name__ == "__main__":
    main()
