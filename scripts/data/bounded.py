#!/usr/bin/env python3
"""The bounded-memory check of issue 11, at scale, side by side with PyTorch.

Generates, under --dir (nothing is downloaded):
  images/  an image folder of noise PNGs (incompressible, so bytes on disk
           are what they decode from) of mixed sizes, 10 classes, at least
           --factor times --image-budget on disk; the first image is not the
           largest, so a plan sized on the first image would be wrong;
  small-images/, shards/  noise PNGs of 192 to 320 pixels a side, at least
           --factor times --shard-budget, as WebDataset tar shards
           (headroom prepare), trained by mlp (resized to 28x28, grey);
  tokens.bin  a flat uint16 token file (vocabulary 65) at least --factor
           times --gpt-budget.
Then runs, one at a time, under nice -n 10:
  headroom train --model resnet18-64 --data images/ --budget B --epochs 1
  headroom train --model mlp --data shards/ --budget B --epochs 1
  headroom train --model gpt-shakespeare-char --data tokens.bin --budget B --steps S
and PyTorch training the same models on the same files through DataLoader
(num_workers 2, pin_memory=True, the same batch; torch_train.py). For each
run it samples, every 20 ms, the process's own high-water mark (VmHWM: the
promise is VmHWM <= budget + headroom's stated overhead, processOverhead in
cmd/headroom/process.go) and the whole process tree's resident memory
(RSS summed over the process and its descendants, and PSS summed, which
counts pages shared between forked workers once), and the tree's CPU time
(user + system, from wait4). Prints the table as Markdown.

The images are read whole (one epoch); the GPT runs a few steps, whose
windows are drawn, shuffled, from the whole file: the loader reads them
with pread out of the page cache, so what the file's size adds to the
process is its order array (8 bytes a window), which is planned.

    /usr/bin/python3 scripts/data/bounded.py [--dir /tmp/headroom-bounded]
        [--image-budget 320MiB] [--gpt-budget 240MiB] [--shard-budget 32MiB] [--factor 4.2]
        [--batch 8] [--gpt-steps 3] [--workers 2] [--runs images,shards,tokens]
        [--no-torch]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench import field, tree  # noqa: E402

MiB = 2**20
OVERHEAD = 32 * MiB  # processOverhead in cmd/headroom/process.go


def parse_bytes(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(KiB|MiB|GiB|)", s)
    if not m:
        sys.exit(f"bad size {s!r}")
    return int(float(m.group(1)) * {"": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[m.group(2)])


def du(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def gen_images(out, target, sizes, seed=1):
    """Noise PNGs of mixed sizes until the folder holds target bytes."""
    if os.path.isdir(out) and du(out) >= target:
        return
    rnd = random.Random(seed)
    rng = np.random.default_rng(seed)
    total, i = du(out) if os.path.isdir(out) else 0, 0
    while total < target:
        d = os.path.join(out, f"class{i % 10:02d}")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"{i:06d}.png")
        # The first file in sorted order (class00/000000.png) is small.
        w, h = sizes[0] if i == 0 else rnd.choice(sizes)
        if not os.path.exists(path):
            px = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            Image.fromarray(px).save(path + ".tmp.png", compress_level=1)
            os.rename(path + ".tmp.png", path)
            total += os.path.getsize(path)
        i += 1


def gen_tokens(path, target, seed=1):
    if os.path.exists(path) and os.path.getsize(path) >= target:
        return
    rng = np.random.default_rng(seed)
    n = target // 2 + 1
    with open(path + ".tmp", "wb") as f:
        for lo in range(0, n, 1 << 24):
            rng.integers(0, 65, size=min(1 << 24, n - lo), dtype=np.uint16).tofile(f)
    os.rename(path + ".tmp", path)


class Sampler(threading.Thread):
    """The root's VmHWM and the tree's summed RSS and PSS, until stopped."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.hwm, self.rss, self.pss = pid, 0, 0, 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            self.hwm = max(self.hwm, field(f"/proc/{self.pid}/status", "VmHWM:"))
            ps = tree(self.pid)
            self.rss = max(self.rss, sum(field(f"/proc/{p}/status", "VmRSS:") for p in ps))
            self.pss = max(self.pss, sum(field(f"/proc/{p}/smaps_rollup", "Pss:") for p in ps))
            time.sleep(0.02)


def measure(cmd):
    print("$ " + " ".join(cmd), flush=True)
    outf = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen(["nice", "-n", "10"] + cmd, stdout=outf, stderr=subprocess.STDOUT, text=True)
    s = Sampler(p.pid)
    s.start()
    # wait4's usage covers the child and the descendants it reaped (the
    # DataLoader's workers): the CPU time of the whole tree.
    _, status, ru = os.wait4(p.pid, 0)
    s.stop.set()
    s.join()
    outf.seek(0)
    out = outf.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"exit {os.waitstatus_to_exitcode(status)}\n{out[-4000:]}")
    m = re.search(r"VmHWM (\d+) bytes", out)
    hwm = max(s.hwm, int(m.group(1)) if m else 0)
    return out, {"hwm": hwm, "rss": s.rss, "pss": s.pss, "cpu": ru.ru_utime + ru.ru_stime}


def mib(b):
    return f"{b / MiB:.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/headroom-bounded")
    ap.add_argument("--image-budget", default="320MiB")
    ap.add_argument("--gpt-budget", default="240MiB")
    ap.add_argument("--shard-budget", default="32MiB")
    ap.add_argument("--factor", type=float, default=4.2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--gpt-steps", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", default="images,shards,tokens")
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()
    runs = a.runs.split(",")
    ib, gb = parse_bytes(a.image_budget), parse_bytes(a.gpt_budget)
    os.makedirs(a.dir, exist_ok=True)
    images, small, shards, tokens = (os.path.join(a.dir, n) for n in ("images", "small-images", "shards", "tokens.bin"))
    sb = parse_bytes(a.shard_budget)
    bin_ = os.path.join(a.dir, "headroom")
    subprocess.run(["go", "build", "-o", bin_, "./cmd/headroom"], cwd=ROOT, check=True)
    if "images" in runs:
        gen_images(images, int(a.factor * ib), [(1024, 768), (768, 1024), (1536, 1152), (2048, 1536), (1280, 1280)])
    if "shards" in runs:
        # Smaller images: a stream's shuffle pool holds (shuffle buffer +
        # (depth+1) x batch) records at the largest record's bytes, which
        # for 9 MiB photos alone needs a budget of about 1 GiB.
        gen_images(small, int(a.factor * sb), [(256, 192), (192, 256), (320, 240), (256, 256)])
        if not os.path.isdir(shards):
            subprocess.run([bin_, "prepare", "--images", small, "--out", shards, "--shard-size", "16MiB"], check=True)
    if "tokens" in runs:
        gen_tokens(tokens, int(a.factor * gb))
    torch_py = [sys.executable, os.path.join(HERE, "torch_train.py")]
    common = ["--batch-size", str(a.batch)]
    plan = []
    if "images" in runs:
        plan.append(("resnet18-64, image folder", images, ib, [bin_, "train", "--model", "resnet18-64", "--data", images, "--budget", a.image_budget, "--epochs", "1"] + common,
                     torch_py + ["images", images, "--size", "64", "--batch", str(a.batch), "--workers", str(a.workers), "--epochs", "1"]))
    if "shards" in runs:
        plan.append(("mlp, tar shards", shards, sb, [bin_, "train", "--model", "mlp", "--data", shards, "--budget", a.shard_budget, "--epochs", "1"] + common, None))
    if "tokens" in runs:
        plan.append(("gpt-shakespeare-char, token file", tokens, gb, [bin_, "train", "--model", "gpt-shakespeare-char", "--data", tokens, "--budget", a.gpt_budget, "--steps", str(a.gpt_steps)] + common,
                     torch_py + ["tokens", tokens, "--batch", str(a.batch), "--workers", str(a.workers), "--steps", str(a.gpt_steps)]))
    rows = []
    for name, data, budget, hcmd, tcmd in plan:
        size = du(data)
        out, h = measure(hcmd)
        line = [l for l in out.splitlines() if l.startswith("process peak") or l.startswith("epoch ") or l.startswith("data:") or l.startswith("stopped")]
        print("\n".join(line), flush=True)
        ok = "within" if h["hwm"] <= budget + OVERHEAD else "ABOVE"
        rows.append(f"| {name} | {size / MiB:.0f} MiB ({size / budget:.1f}x) | headroom, budget {budget / MiB:.0f} MiB | {mib(h['hwm'])} ({ok} {mib(budget + OVERHEAD)}) | {mib(h['rss'])} | {mib(h['pss'])} | {h['cpu']:.1f} |")
        print(rows[-1], flush=True)
        if tcmd and not a.no_torch:
            out, t = measure(tcmd)
            j = json.loads(out.strip().splitlines()[-1])
            rows.append(f"| {name} | same files | PyTorch DataLoader, {a.workers} workers, pin_memory | {mib(t['hwm'])} (parent) | {mib(t['rss'])} | {mib(t['pss'])} | {t['cpu']:.1f} |")
            print(rows[-1], f"({j['samples']} samples, {j['steps']} steps)", flush=True)
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"\nbatch {a.batch}; load average at the end {load}; {os.cpu_count()} CPUs")
    print("| run | data on disk (x budget) | engine | peak RSS of the process (VmHWM), MiB | tree peak RSS, MiB | tree peak PSS, MiB | CPU s |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
