#!/usr/bin/env python3
"""Writes an image folder of JPEGs (one subfolder per class) for the loader
benchmark: smooth gradients with noise and shapes, ImageNet-like sizes, so
that files compress as photos do. Needs python3-pil; downloads nothing.

    python3 gen_images.py OUT [--images N] [--classes C] [--seed S]
"""
import argparse
import os
import random

from PIL import Image, ImageDraw, ImageFilter


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    sizes = [(500, 375), (375, 500), (500, 333), (640, 480), (400, 400)]
    for i in range(a.images):
        c = i % a.classes
        d = os.path.join(a.out, f"class{c:02d}")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"{i:06d}.jpg")
        if os.path.exists(path):
            continue
        w, h = rnd.choice(sizes)
        base = tuple(rnd.randrange(256) for _ in range(3))
        img = Image.new("RGB", (w, h), base)
        draw = ImageDraw.Draw(img)
        for _ in range(12):
            x0, y0 = rnd.randrange(w), rnd.randrange(h)
            x1, y1 = x0 + rnd.randrange(20, w // 2), y0 + rnd.randrange(20, h // 2)
            col = tuple(rnd.randrange(256) for _ in range(3))
            (draw.ellipse if rnd.random() < 0.5 else draw.rectangle)([x0, y0, x1, y1], fill=col)
        img = img.filter(ImageFilter.GaussianBlur(2))
        noise = Image.effect_noise((w, h), 24).convert("RGB")
        img = Image.blend(img, noise, 0.15)
        img.save(path, quality=90)


if __name__ == "__main__":
    main()
