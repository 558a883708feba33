#!/usr/bin/python3
"""Where a colour shift of the L1-trained generator comes from
(docs/esrgan.md, "The colour shift"): the data, or the model.

    /usr/bin/python3 scripts/esrgan/color_check.py SRTOOL PHOTOS WEIGHTS [WORK]

SRTOOL is a built scripts/esrgan/srtool, PHOTOS the folder of
scripts/esrgan/photos.sh, WEIGHTS a generator (nf 16, nb 3, gc 8). Needs
/usr/bin/python3 with torch and PIL (python3-torch, python3-pil). Prints:

1. headroom's JPEG decode against PIL's (libjpeg), per channel;
2. per photo, the channel means of the photo (HR), of its 4x downscale
   rounded to 8 bits (LR, headroom's srtool lr) and of the bicubic
   upsampling of that, and headroom's LR against PyTorch's
   interpolate(bicubic, antialias=True);
3. the same means over random 64x64 training crops, as gan --pixel-only
   cuts them;
4. the generator on flat colours (a constant input should come back
   unchanged), and its mean error per channel on each photo.
"""
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "reference"))
import st  # noqa: E402
from torch_models import RRDBNet  # noqa: E402

torch.set_num_threads(1)
srtool, photos, weights = sys.argv[1:4]
work = sys.argv[4] if len(sys.argv) > 4 else tempfile.mkdtemp()
os.makedirs(work, exist_ok=True)


def png(path):
    return np.asarray(Image.open(path).convert("RGB")).astype(np.float64)


def down(g):  # PyTorch's antialiased bicubic 4x downscale, 8-bit
    t = torch.from_numpy(g.transpose(2, 0, 1)[None] / 255.0)
    lr = F.interpolate(t, scale_factor=0.25, mode="bicubic", antialias=True)
    return np.clip(np.round(lr[0].numpy().transpose(1, 2, 0) * 255), 0, 255)


def up(lr):  # bicubic 4x upsampling (PyTorch's, a = -0.75 differs from PIL's -0.5 little in the mean)
    t = torch.from_numpy(lr.transpose(2, 0, 1)[None] / 255.0)
    u = F.interpolate(t, scale_factor=4, mode="bicubic", align_corners=False)
    return np.clip(np.round(u[0].numpy().transpose(1, 2, 0) * 255), 0, 255)


def mean3(x):
    return x.reshape(-1, 3).mean(0)


def fmt(v):
    return " ".join(f"{x:+.3f}" for x in v)


paths = sorted(glob.glob(os.path.join(photos, "*", "photos", "*.jpg")))
hr = {}
print("1. decode: headroom - PIL, mean per channel (levels), max |difference|")
for p in paths:
    n = os.path.basename(p)[:-4]
    subprocess.run([srtool, "decode", p, f"{work}/{n}-hr.png"], check=True)
    subprocess.run([srtool, "lr", p, f"{work}/{n}-lr.png"], check=True, stdout=subprocess.DEVNULL)
    g = png(f"{work}/{n}-hr.png")
    d = g - np.asarray(Image.open(p).convert("RGB")).astype(np.float64)
    print(f"  {n:13s} {fmt(mean3(d))}  max {np.abs(d).max():.0f}")
    h, w = g.shape[0] // 4 * 4, g.shape[1] // 4 * 4
    hr[n] = g[:h, :w]

print("2. photos: mean(LR) - mean(HR), mean(bicubic up of LR) - mean(HR); headroom LR - PyTorch LR")
for n, g in hr.items():
    lr = png(f"{work}/{n}-lr.png")
    ref = down(g)
    print(f"  {n:13s} LR {fmt(mean3(lr) - mean3(g))}  up {fmt(mean3(up(lr)) - mean3(g))}"
          f"  vs PyTorch {fmt(mean3(lr - ref))} max {np.abs(lr - ref).max():.0f}")

print("3. 2000 random 64x64 training crops: mean over crops of mean(LR) - mean(HR); worst crop")
rng = np.random.default_rng(1)
train = [g for p, g in zip(paths, hr.values()) if os.sep + "train" + os.sep in p]
diffs = []
for _ in range(2000):
    g = train[rng.integers(len(train))]
    y, x = rng.integers(g.shape[0] - 64), rng.integers(g.shape[1] - 64)
    c = g[y:y + 64, x:x + 64]
    diffs.append(mean3(down(c)) - mean3(c))
diffs = np.array(diffs)
print(f"  mean {fmt(diffs.mean(0))}  worst |crop| {np.abs(diffs).max():.3f}")

sd = st.load(weights)[0]
net = RRDBNet(3, 3, 16, 3, 8)
net.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in sd.items()})
net.eval()
cols = [(36, 84, 141), (30, 75, 135), (20, 60, 120), (8, 70, 130), (60, 120, 200),
        (48, 80, 120), (128, 128, 128), (20, 20, 20), (40, 50, 20), (190, 150, 100), (240, 120, 60)]
x = torch.tensor(cols, dtype=torch.float32)[:, :, None, None].expand(-1, -1, 24, 24) / 255
with torch.no_grad():
    y = (net(x) * 255)[:, :, 40:56, 40:56].mean((2, 3)).numpy()
print("4. flat colours: output - input of a constant 24x24 input (levels, centre of the output)")
for c, o in zip(cols, y):
    print(f"  {str(c):16s} {fmt(o - np.array(c))}")
print("   mean error per channel on the photos (4 px border cut; Kite whole, others a 512 crop)")
for n, g in hr.items():
    if n not in ("Kite", "EveningGlow"):
        g = g[600:1112, 1000:1512]
    lr = torch.from_numpy(down(g).transpose(2, 0, 1)[None] / 255).float()
    with torch.no_grad():
        sr = torch.clamp(torch.round(net(lr).double() * 255), 0, 255)[0].numpy().transpose(1, 2, 0)
    d = (sr - g)[4:-4, 4:-4]
    psnr = 10 * np.log10(255 ** 2 / (d ** 2).mean())
    print(f"  {n:13s} {fmt(mean3(d))}  RGB PSNR {psnr:.2f}")
    if n == "Kite":
        r = g[4:-4, 4:-4, 0]
        for lo, hi in [(0, 20), (20, 30), (30, 40), (40, 50), (50, 256)]:
            m = (r >= lo) & (r < hi)
            print(f"    Kite, photo's red in [{lo}, {hi}) ({m.mean():.0%} of it): {fmt(d[m].mean(0))}")
