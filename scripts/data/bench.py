#!/usr/bin/env python3
"""Side-by-side benchmark of headroom's data loader and PyTorch's
DataLoader on the same generated image folder with the same transforms
and workers, and the data wait of headroom training ResNet-18 on it.

For each repeat it runs, in turn, one pass of loaderbench (headroom) and
of torch_loader.py (DataLoader, pin_memory=True), sampling the resident
memory of the whole process tree (the process and every descendant: RSS
summed, and PSS summed, which counts pages shared between forked workers
once) every 20 ms, and prints images/s, the CPU time per image of the
whole tree (user + system, from wait4) and the tree's peaks; then
`headroom train --model resnet18 --data DIR --log` and the share of the
steps' time spent waiting for data (the first step, which waits for the
pipeline to fill, excluded). Medians and min-max over the repeats at the
end. Needs python3-torch, python3-torchvision and python3-pil (Debian);
downloads nothing.

    python3 scripts/data/bench.py [--data /tmp/headroom-bench-images] [--images 1000]
        [--repeats 3] [--workers 2] [--batch 32] [--train-steps 6] [--train-batch 32]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def tree(pid):
    """pid and its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def field(path, key):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Sampler(threading.Thread):
    """Samples a process tree's summed RSS and PSS until stopped."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.rss, self.pss, self.stop = pid, 0, 0, threading.Event()

    def run(self):
        while not self.stop.is_set():
            ps = tree(self.pid)
            self.rss = max(self.rss, sum(field(f"/proc/{p}/status", "VmRSS:") for p in ps))
            self.pss = max(self.pss, sum(field(f"/proc/{p}/smaps_rollup", "Pss:") for p in ps))
            time.sleep(0.02)


def measure(cmd):
    errf = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, text=True)
    s = Sampler(p.pid)
    s.start()
    out = p.stdout.read()
    # wait4's usage covers the child and the descendants it reaped (the
    # DataLoader's workers): the CPU time of the whole tree.
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    s.stop.set()
    s.join()
    if p.returncode != 0:
        errf.seek(0)
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{errf.read()[-3000:]}")
    return out, s.rss, s.pss, ru.ru_utime + ru.ru_stime


def med(xs):
    return f"{statistics.median(xs):8.1f}  ({min(xs):.1f} to {max(xs):.1f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/headroom-bench-images")
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--train-steps", type=int, default=6)
    ap.add_argument("--train-batch", type=int, default=32)
    a = ap.parse_args()
    subprocess.run([sys.executable, os.path.join(HERE, "gen_images.py"), a.data, "--images", str(a.images)], check=True)
    tmp = tempfile.mkdtemp(prefix="headroom-bench-")
    for name, pkg in [("headroom", "./cmd/headroom"), ("loaderbench", "./scripts/data/loaderbench")]:
        subprocess.run(["go", "build", "-o", os.path.join(tmp, name), pkg], cwd=ROOT, check=True)
    common = ["--workers", str(a.workers), "--batch", str(a.batch)]
    runs = {"headroom": [os.path.join(tmp, "loaderbench"), "-data", a.data, "-workers", str(a.workers), "-batch", str(a.batch)],
            "torch": [sys.executable, os.path.join(HERE, "torch_loader.py"), a.data] + common}
    res = {k: {"ips": [], "rss": [], "pss": [], "cpu": []} for k in runs}
    wait = []
    for r in range(a.repeats):
        for k, cmd in runs.items():
            out, rss, pss, cpu = measure(cmd)
            j = json.loads(out.strip().splitlines()[-1])
            res[k]["cpu"].append(1000 * cpu / j["images"])
            res[k]["ips"].append(j["images_per_s"])
            res[k]["rss"].append(rss / 2**20)
            res[k]["pss"].append(pss / 2**20)
            print(f"repeat {r + 1} {k:8s}: {j['images_per_s']:.1f} images/s, {res[k]['cpu'][-1]:.1f} CPU ms/image, tree peak RSS {rss / 2**20:.1f} MiB, PSS {pss / 2**20:.1f} MiB", flush=True)
        if a.train_steps > 0:
            log = os.path.join(tmp, f"train-{r}.jsonl")
            cmd = [os.path.join(tmp, "headroom"), "train", "--model", "resnet18", "--data", a.data, "--batch-size", str(a.train_batch),
                   "--steps", str(a.train_steps), "--log", log]
            measure(cmd)[0]
            steps = [json.loads(l) for l in open(log)][1:]
            w = sum(s["data_wait_s"] for s in steps)
            t = sum(s["data_wait_s"] + s["step_s"] for s in steps)
            wait.append(100 * w / t)
            print(f"repeat {r + 1} resnet18 : data wait {w:.2f} s of {t:.1f} s of steps 2-{a.train_steps} = {100 * w / t:.2f}%", flush=True)
    print(f"\n{a.images} JPEGs in {a.data}; {a.workers} workers, batch {a.batch}; median (min to max) of {a.repeats}")
    print(f"{'':10s} {'images/s':>28s} {'CPU ms/image':>28s} {'tree peak RSS MiB':>28s} {'tree peak PSS MiB':>28s}")
    for k, v in res.items():
        print(f"{k:10s} {med(v['ips']):>28s} {med(v['cpu']):>28s} {med(v['rss']):>28s} {med(v['pss']):>28s}")
    if wait:
        print(f"resnet18 training, batch {a.train_batch}: data wait {med(wait)} % of the steps' time")


if __name__ == "__main__":
    main()
