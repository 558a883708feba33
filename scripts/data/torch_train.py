#!/usr/bin/env python3
"""PyTorch's side of bounded.py: trains the model headroom trains, on the
same files, through torch.utils.data.DataLoader (num_workers, pin_memory=True,
shuffle, the same batch), and prints one JSON line: samples, steps,
seconds, the last loss.

    python3 torch_train.py images DIR [--size 64] [--batch 8] [--workers 2] [--epochs 1] [--steps 0]
    python3 torch_train.py tokens FILE [--batch 8] [--workers 2] [--steps 3]

images: torchvision's resnet18 (10 classes) on an image folder resized to
size x size (headroom's resnet18-64), Adam lr 1e-3. tokens: nanoGPT's
shakespeare_char GPT (6 layers, 384 wide, context 256, vocabulary 65,
dropout 0.2, no biases; headroom's gpt-shakespeare-char) on a flat uint16
token file read through np.memmap as nanoGPT does, windows of 256 at a
stride of 256 (headroom's token source), Adam lr 1e-3.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torchvision import transforms as T

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from torch_models import GPT, gpt_loss  # noqa: E402


class Tokens(torch.utils.data.Dataset):
    """Windows x = t[s:s+T], y = t[s+1:s+T+1], s = i*T of a uint16 file."""

    def __init__(self, path, context):
        self.path, self.t = path, context
        self.n = (os.path.getsize(path) // 2 - 1) // context
        self.mm = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        # Opened lazily in each worker, as nanoGPT re-opens its memmap.
        if self.mm is None:
            self.mm = np.memmap(self.path, dtype=np.uint16, mode="r")
        s = i * self.t
        w = torch.from_numpy(self.mm[s:s + self.t + 1].astype(np.int64))
        return w[:-1], w[1:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["images", "tokens"])
    ap.add_argument("data")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(1)
    if a.kind == "images":
        tf = T.Compose([T.Resize((a.size, a.size), interpolation=T.InterpolationMode.BILINEAR), T.ToTensor()])
        ds = torchvision.datasets.ImageFolder(a.data, transform=tf)
        model = torchvision.models.resnet18(num_classes=10)
        loss_fn = F.cross_entropy
    else:
        ds = Tokens(a.data, 256)
        model = GPT(dict(n_layer=6, n_head=6, n_embd=384, block_size=256, vocab_size=65, dropout=0.2, bias=False))
        loss_fn = gpt_loss
    # pin_memory as the comparison asks; without an accelerator
    # PyTorch ignores it (with a warning).
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                                     pin_memory=True, drop_last=False, persistent_workers=a.workers > 0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    n = steps = 0
    loss = None
    start = time.perf_counter()
    for _ in range(a.epochs):
        for x, y in dl:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            n += x.shape[0]
            steps += 1
            if a.steps and steps >= a.steps:
                break
        if a.steps and steps >= a.steps:
            break
    s = time.perf_counter() - start
    print(json.dumps({"samples": n, "steps": steps, "seconds": s, "loss": float(loss)}))


if __name__ == "__main__":
    main()
