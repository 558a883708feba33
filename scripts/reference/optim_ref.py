#!/usr/bin/python3
"""Reference values for package optim, produced by PyTorch 1.13.

Run with Debian's interpreter (the one that has torch):

    /usr/bin/python3 scripts/reference/optim_ref.py

It writes three files into optim/testdata/:

  optimizers.safetensors  parameter values after every step of every
                          optimizer configuration, plus the final state
  clip.safetensors        clip_grad_norm_ total norms and clipped gradients
  schedulers.safetensors  learning-rate sequences of the schedulers

Every file carries its configuration table as JSON in the safetensors
metadata ("configs"), so the Go tests can check that their own tables
describe the same runs.
"""

import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from st import save  # noqa: E402  (shared safetensors writer)

OUT = os.path.normpath(os.path.join(HERE, "..", "..", "optim", "testdata"))

# Parameter shapes: sizes below, at and well above the 8-float AVX2 vector
# width so that both the vectorized loops and their scalar tails of the CPU
# kernels are exercised. Gradient scales differ per parameter so Adam's eps
# matters for one of them.
PARAMS = [("p0", (7,), 1.0), ("p1", (4, 5), 1e-3), ("p2", (3, 17), 10.0), ("p3", (300,), 1e-6)]
STEPS = 6
# (step, param) pairs whose gradient is None, as when a parameter took no part
# in the loss: PyTorch skips it, including its Adam step count.
NO_GRAD = {(2, "p1"), (3, "p1"), (4, "p3")}

OPTIMIZERS = [
    # name, class, kwargs
    ("sgd", "SGD", dict(lr=0.1)),
    ("sgd_momentum", "SGD", dict(lr=0.05, momentum=0.9)),
    ("sgd_nesterov", "SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
    ("sgd_dampening", "SGD", dict(lr=0.05, momentum=0.8, dampening=0.3)),
    ("sgd_weight_decay", "SGD", dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
    ("sgd_maximize", "SGD", dict(lr=0.02, momentum=0.5, weight_decay=0.1, nesterov=True, maximize=True)),
    ("adam", "Adam", dict()),
    ("adam_weight_decay", "Adam", dict(lr=3e-3, weight_decay=0.1)),
    ("adam_amsgrad", "Adam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, amsgrad=True)),
    ("adam_maximize", "Adam", dict(lr=2e-3, weight_decay=0.05, amsgrad=True, maximize=True)),
    ("adamw", "AdamW", dict()),
    ("adamw_amsgrad", "AdamW", dict(lr=5e-3, weight_decay=0.1, amsgrad=True)),
    ("adamw_big_lr", "AdamW", dict(lr=0.5, betas=(0.5, 0.6), eps=1e-3, weight_decay=0.3, maximize=True)),
]


def initial_params():
    g = torch.Generator().manual_seed(1234)
    return {n: torch.randn(s, generator=g, dtype=torch.float32) for n, s, _ in PARAMS}


def gradients():
    g = torch.Generator().manual_seed(5678)
    out = {}
    for step in range(STEPS):
        for n, s, scale in PARAMS:
            # Drawn even when unused so that the stream does not depend on NO_GRAD.
            v = torch.randn(s, generator=g, dtype=torch.float32) * scale
            if (step, n) not in NO_GRAD:
                out[(step, n)] = v
    return out


def run_optimizers(tensors, configs):
    init = initial_params()
    grads = gradients()
    for n, _, _ in PARAMS:
        tensors[f"init/{n}"] = init[n]
    for (step, n), v in grads.items():
        tensors[f"grad/{step}/{n}"] = v
    for name, cls, kw in OPTIMIZERS:
        configs[name] = dict(kw, optimizer=cls)
        ps = {n: init[n].clone().requires_grad_(True) for n, _, _ in PARAMS}
        # foreach=False: the single-tensor code path, whose arithmetic order
        # the Go implementation follows (it is also 1.13's default on CPU).
        opt = getattr(torch.optim, cls)([ps[n] for n, _, _ in PARAMS], foreach=False, **kw)
        for step in range(STEPS):
            for n, _, _ in PARAMS:
                g = grads.get((step, n))
                ps[n].grad = None if g is None else g.clone()
            opt.step()
            for n, _, _ in PARAMS:
                tensors[f"{name}/{step}/{n}"] = ps[n].detach().clone()
        for n, _, _ in PARAMS:
            for k, v in opt.state[ps[n]].items():
                if v is None:
                    continue
                tensors[f"{name}/state/{n}/{k}"] = v.detach().clone().reshape(-1)


def run_clip(tensors, configs):
    g = torch.Generator().manual_seed(42)
    cases = [
        # name, max_norm, norm_type, gradient scale, params without gradient
        ("l2_clipped", 1.0, 2.0, 1.0, []),
        ("l2_unclipped", 1000.0, 2.0, 1.0, []),
        ("l2_skip_none", 0.5, 2.0, 3.0, ["p1"]),
        ("l2_tiny", 1e-3, 2.0, 1e-4, []),
        ("inf_clipped", 0.25, math.inf, 1.0, []),
        ("inf_unclipped", 100.0, math.inf, 2.0, ["p0"]),
    ]
    for name, max_norm, norm_type, scale, none in cases:
        configs[name] = dict(max_norm=max_norm, norm_type="inf" if norm_type == math.inf else norm_type,
                             no_grad=none)
        ps = []
        for n, s, _ in PARAMS:
            p = torch.zeros(s, requires_grad=True)
            gv = torch.randn(s, generator=g, dtype=torch.float32) * scale
            if n not in none:
                p.grad = gv.clone()
                tensors[f"{name}/grad/{n}"] = gv
            ps.append((n, p))
        total = torch.nn.utils.clip_grad_norm_([p for _, p in ps], max_norm, norm_type)
        tensors[f"{name}/total_norm"] = total.detach().reshape(1).clone()
        for n, p in ps:
            if p.grad is not None:
                tensors[f"{name}/clipped/{n}"] = p.grad.detach().clone()


SCHED_STEPS = 30
SCHEDULERS = [
    # name, base lr, description (interpreted by make_scheduler and by the Go test)
    ("step_7_half", 0.1, [("StepLR", dict(step_size=7, gamma=0.5))]),
    ("step_3_tenth", 1.0, [("StepLR", dict(step_size=3, gamma=0.1))]),
    ("cosine_10", 0.1, [("CosineAnnealingLR", dict(T_max=10, eta_min=1e-3))]),
    ("cosine_30", 3e-4, [("CosineAnnealingLR", dict(T_max=30))]),
    ("cosine_7", 0.05, [("CosineAnnealingLR", dict(T_max=7, eta_min=0.01))]),
    ("linear_warmup", 0.1, [("LinearLR", dict(start_factor=0.25, end_factor=1.0, total_iters=8))]),
    ("linear_decay", 0.02, [("LinearLR", dict(start_factor=1.0, end_factor=0.1, total_iters=10))]),
    ("linear_default", 0.3, [("LinearLR", dict())]),
    ("warmup_cosine", 1e-3, [("LinearLR", dict(start_factor=0.1, total_iters=5)),
                             ("CosineAnnealingLR", dict(T_max=25, eta_min=1e-5)), 5]),
    ("warmup_step_cosine", 0.5, [("LinearLR", dict(start_factor=0.5, total_iters=4)),
                                 ("StepLR", dict(step_size=3, gamma=0.5)),
                                 ("CosineAnnealingLR", dict(T_max=12)), 6, 14]),
    # The schedules of `headroom train --lr-schedule` (optim.Schedule), built
    # as torchvision's reference scripts build theirs: a LinearLR warm-up
    # from --lr-warmup-decay, then the main schedule, over SCHED_STEPS steps.
    ("recipe_warmup_cosine", 0.1, [("LinearLR", dict(start_factor=0.01, total_iters=5)),
                                   ("CosineAnnealingLR", dict(T_max=SCHED_STEPS - 5, eta_min=1e-4)), 5]),
    ("recipe_cosine", 3e-3, [("CosineAnnealingLR", dict(T_max=SCHED_STEPS, eta_min=0.0))]),
    ("recipe_warmup_linear", 0.05, [("LinearLR", dict(start_factor=0.01, total_iters=3)),
                                    ("LinearLR", dict(start_factor=1.0, end_factor=0.0 / 0.05, total_iters=SCHED_STEPS - 3)), 3]),
    ("recipe_linear_min", 0.1, [("LinearLR", dict(start_factor=1.0, end_factor=0.01 / 0.1, total_iters=SCHED_STEPS))]),
    ("recipe_warmup_step", 0.2, [("LinearLR", dict(start_factor=0.01, total_iters=4)),
                                 ("StepLR", dict(step_size=5, gamma=0.5)), 4]),
    ("recipe_warmup_constant", 0.1, [("LinearLR", dict(start_factor=0.25, total_iters=6))]),
]


def make_scheduler(opt, desc):
    subs = [getattr(torch.optim.lr_scheduler, cls)(opt, **kw) for cls, kw in
            (d for d in desc if isinstance(d, tuple))]
    milestones = [d for d in desc if isinstance(d, int)]
    if len(subs) == 1:
        return subs[0]
    return torch.optim.lr_scheduler.SequentialLR(opt, subs, milestones)


def run_schedulers(tensors, configs):
    import warnings
    warnings.simplefilter("ignore")  # SequentialLR's step(0) warns about the epoch argument
    for name, lr, desc in SCHEDULERS:
        configs[name] = dict(lr=lr, schedulers=[[d[0], d[1]] for d in desc if isinstance(d, tuple)],
                             milestones=[d for d in desc if isinstance(d, int)])
        p = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=lr)
        sched = make_scheduler(opt, desc)
        lrs = [opt.param_groups[0]["lr"]]
        for _ in range(SCHED_STEPS):
            opt.step()
            sched.step()
            lrs.append(opt.param_groups[0]["lr"])
        tensors[f"{name}/lr"] = torch.tensor(lrs, dtype=torch.float64)

    # An optimizer driven by a scheduler: the lr changes between steps and
    # Adam's step size must follow it.
    init = initial_params()
    grads = gradients()
    ps = {n: init[n].clone().requires_grad_(True) for n, _, _ in PARAMS}
    configs["adamw_warmup_cosine"] = dict(optimizer="AdamW", lr=1e-2, schedule="warmup_cosine")
    opt = torch.optim.AdamW([ps[n] for n, _, _ in PARAMS], lr=1e-2, foreach=False)
    sched = make_scheduler(opt, dict((s[0], s[2]) for s in SCHEDULERS)["warmup_cosine"])
    for step in range(STEPS):
        for n, _, _ in PARAMS:
            g = grads.get((step, n))
            ps[n].grad = None if g is None else g.clone()
        opt.step()
        sched.step()
        for n, _, _ in PARAMS:
            tensors[f"adamw_warmup_cosine/{step}/{n}"] = ps[n].detach().clone()


def main():
    assert torch.__version__.startswith("1.13"), torch.__version__
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    meta = {"torch": torch.__version__, "script": "scripts/reference/optim_ref.py"}
    for fname, fn in [("optimizers", run_optimizers), ("clip", run_clip), ("schedulers", run_schedulers)]:
        tensors, configs = {}, {}
        fn(tensors, configs)
        path = os.path.join(OUT, fname + ".safetensors")
        save(path, tensors, dict(meta, configs=json.dumps(configs, sort_keys=True)))
        print(f"wrote {path}: {len(tensors)} tensors")


if __name__ == "__main__":
    main()
