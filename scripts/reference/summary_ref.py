#!/usr/bin/python3
"""Per-module parameter counts and output shapes of zoo models, from PyTorch.

Run with Debian's interpreter (python3-torch, python3-torchvision):

    /usr/bin/python3 scripts/reference/summary_ref.py

It writes internal/modsummary/testdata/summary.json: for each model, the
input batch and, for every named module (as model.named_modules() lists
them), its parameter count and the shape of its output (a forward hook on
the module; the last call's). A module's count is the sum over the entries
of model.named_parameters() under its name, what torchinfo counts: a tied
parameter (GPT's lm_head.weight is transformer.wte.weight) is counted once,
under the name named_parameters() gives it.
"""

import json
import os
import sys

import torch
import torch.nn as nn
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_models import GPT, RRDBNet  # noqa: E402

OUT = os.path.normpath(os.path.join(HERE, "..", "..", "internal", "modsummary", "testdata"))


class FashionCNN(nn.Module):
    """zoo/cnn.go."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


SHAKESPEARE = dict(n_layer=6, n_head=6, n_embd=384, block_size=256, vocab_size=65, dropout=0.2, bias=False)

# zoo name, constructor, input (the MLP takes its images flattened, as zoo.MLP
# flattens them itself)
MODELS = [
    ("mlp", lambda: nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)), lambda: torch.zeros(2, 784)),
    ("cnn", FashionCNN, lambda: torch.zeros(2, 1, 28, 28)),
    ("resnet18-64", lambda: torchvision.models.resnet18(num_classes=10), lambda: torch.zeros(2, 3, 64, 64)),
    ("resnet50", lambda: torchvision.models.resnet50(), lambda: torch.zeros(1, 3, 224, 224)),
    ("gpt-shakespeare-char", lambda: GPT(SHAKESPEARE), lambda: torch.zeros(2, 256, dtype=torch.long)),
    ("rrdbnet", lambda: RRDBNet(3, 3, 64, 23, 32), lambda: torch.zeros(1, 3, 32, 32)),
]


def summarize(make, inp):
    torch.manual_seed(0)
    m = make().eval()
    params = list(m.named_parameters())
    shapes = {}

    def hook(name):
        def f(mod, args, out):
            if isinstance(out, torch.Tensor):
                shapes[name] = list(out.shape)
        return f

    for name, mod in m.named_modules():
        mod.register_forward_hook(hook(name))
    x = inp()
    with torch.no_grad():
        m(x)
    mods = []
    for name, mod in m.named_modules():
        pre = name + "." if name else ""
        n = sum(p.numel() for pn, p in params if pn.startswith(pre))
        mods.append(dict(name=name, type=type(mod).__name__, params=n, output=shapes.get(name)))
    return dict(input=list(x.shape), total=sum(p.numel() for p in m.parameters()), modules=mods)


def main():
    assert torch.__version__.startswith("1.13"), torch.__version__
    torch.set_num_threads(2)
    out = {"script": "scripts/reference/summary_ref.py", "torch": torch.__version__, "models": {}}
    for name, make, inp in MODELS:
        out["models"][name] = summarize(make, inp)
        print(name, out["models"][name]["total"], len(out["models"][name]["modules"]), "modules")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "summary.json"), "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
