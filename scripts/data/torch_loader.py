#!/usr/bin/env python3
"""One pass of torch.utils.data.DataLoader over an image folder with the
transforms of headroom's loader benchmark (loaderbench): Resize to 256x256
(bilinear), RandomCrop 224, RandomHorizontalFlip, ToTensor, Normalize.
Prints one JSON line: images, seconds, images/s.

    python3 torch_loader.py DIR [--workers 2] [--batch 32] [--epochs 1]
"""
import argparse
import json
import time

import torch
import torchvision
from torchvision import transforms as T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=1)
    a = ap.parse_args()
    tf = T.Compose([
        T.Resize((256, 256), interpolation=T.InterpolationMode.BILINEAR),
        T.RandomCrop(224),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    ds = torchvision.datasets.ImageFolder(a.data, transform=tf)
    # pin_memory as the comparison asks; without an accelerator
    # PyTorch ignores it (with a warning).
    dl = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers,
                                     pin_memory=True, drop_last=False, persistent_workers=a.workers > 0)
    n = 0
    start = time.perf_counter()
    for _ in range(a.epochs):
        for x, y in dl:
            n += x.shape[0]
    s = time.perf_counter() - start
    print(json.dumps({"loader": "torch", "images": n, "seconds": s, "images_per_s": n / s}))


if __name__ == "__main__":
    main()
