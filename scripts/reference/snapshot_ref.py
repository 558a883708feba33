#!/usr/bin/python3
"""Reference memory snapshots in PyTorch's formats, for package memviz; and
the check that headroom's exported pickle is what memory_viz reads.

    /usr/bin/python3 scripts/reference/snapshot_ref.py           # write memviz/testdata
    /usr/bin/python3 scripts/reference/snapshot_ref.py --check   # check memviz/testdata/headroom_export*.pickle

Debian's python3-torch is 1.13, CPU-only: torch.cuda.memory._snapshot() and
_dump_snapshot need CUDA, so this script builds the dicts itself, exactly in
the layout PyTorch writes, from a small simulation of the caching allocator
(512-byte rounding; requests up to 1 MiB from 2 MiB segments, larger ones
from 20 MiB segments up to 10 MiB and rounded to 2 MiB above; best fit;
splitting; coalescing; empty_cache), and pickles them with Python's pickle
as _dump_snapshot does (pickle.dump(torch.cuda.memory._snapshot(), f)).

The layout followed is torch/csrc/cuda/Module.cpp's THCPModule_memorySnapshot
of PyTorch 2.1 to 2.5, with the trace entries' "time_us" (2.2 on) and the
top-level "allocator_settings" of the later releases:

  {"segments": [{"device", "address", "total_size", "allocated_size",
                 "active_size", "requested_size", "stream", "segment_type",
                 "segment_pool_id": (int, int), "is_expandable",
                 "blocks": [{"address", "size", "requested_size", "state",
                             "frames"}],
                 "frames"}],
   "device_traces": [[{"action", "addr" (oom: "device_free"), "size",
                       "stream", "time_us", "frames"}], ...],
   "allocator_settings": {...}}

with frames [{"name", "filename", "line"}] innermost first, frame dicts
shared between stacks and one empty list shared by every block without a
stack, as PyTorch's symbolizer does; a trace entry's size is the requested
size (orig_size) for alloc/free_requested/free_completed.

Files written to memviz/testdata:

  torch_2x.pickle        the main simulation, protocol 4 (Python 3.8-3.13's
                         default): 2 devices (device 1 with no history), a
                         ring buffer that dropped its oldest entries (frees
                         whose alloc fell out, blocks allocated before it), a
                         free delayed by record_stream (free_requested and
                         free_completed apart, one still pending at the
                         snapshot), an oom, empty_cache
  torch_2x.facts.json    the simulation's own account of that history: the
                         active (requested) bytes, reserved bytes and segment
                         count after each event (free_requested immediately
                         followed by its free_completed counted as one event,
                         as memory_viz and headroom do), the blocks pending
                         free, the peak, the largest live allocations at the
                         peak (ties by address) with the stack the file holds
                         for each
  torch_2_0.pickle       the same history as PyTorch 2.0 wrote it (protocol
                         3): blocks with "history" [{addr, real_size, frames}]
                         instead of address, requested_size and frames; no
                         time_us, is_expandable, segment_pool_id or
                         allocator_settings
  torch_1_13.pickle      torch.cuda.memory_snapshot() of PyTorch 1.13
                         (protocol 2): a list of segments, blocks {size,
                         state, history}
  torch_expandable.pickle  expandable segments (PYTORCH_CUDA_ALLOC_CONF=
                         expandable_segments:True): segment_map and
                         segment_unmap entries, is_expandable, "user_metadata"
                         on entries; protocol 5 (Python 3.14's default)
  torch_expandable.facts.json  the mapped ranges after each of its events

The "where" of an allocation in the facts is its innermost frame in a .py
file outside the framework (not PyTorch's, not an installed package's, not
the standard library's: the user's code that asked), else its innermost
.py frame, else its innermost frame, which is what the viewer shows.

--check reads memviz/testdata/headroom_export*.pickle (headroom's exports of
the Go tests' snapshots, written by go test ./memviz -run TestExportGolden
-update) and verifies that memory_viz can read them: only the opcodes memory_viz's unpickler implements, the keys
and types it uses, every block and every alloc/free address inside a
segment live at that moment (memory_viz's segment view needs that), and
"unknown" among the categories when entries have categories (its
annotate_snapshot otherwise throws). Nothing is executed: the pickles hold
plain values only.
"""
import json
import os
import pickle
import pickletools
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "memviz", "testdata")

KiB, MiB = 1 << 10, 1 << 20


def frame(filename, line, name):
    return {"name": name, "filename": filename, "line": line}


# Shared frame dicts, as the symbolizer shares them.
F_MALLOC = frame("/opt/pytorch/c10/cuda/CUDACachingAllocator.cpp", 1104,
                 "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int, unsigned long, CUstream_st*)")
F_EVAL = frame("Python/ceval.c", 4181, "_PyEval_EvalFrameDefault")
F_LINEAR = frame("/usr/lib/python3/dist-packages/torch/nn/modules/linear.py", 114, "forward")
F_CONV = frame("/usr/lib/python3/dist-packages/torch/nn/modules/conv.py", 459, "_conv_forward")
F_CALL = frame("/usr/lib/python3/dist-packages/torch/nn/modules/module.py", 1501, "_call_impl")
F_MODEL = frame("/home/user/project/model.py", 42, "forward")
F_LOSS = frame("/home/user/project/model.py", 57, "loss")
F_STEP = frame("/home/user/project/train.py", 88, "step")
F_OPT = frame("/usr/lib/python3/dist-packages/torch/optim/adam.py", 410, "_single_tensor_adam")
F_MAIN = frame("/home/user/project/train.py", 130, "main")

STACKS = {
    "linear": [F_MALLOC, F_EVAL, F_LINEAR, F_CALL, F_MODEL, F_STEP, F_MAIN],
    "conv": [F_MALLOC, F_CONV, F_CALL, F_MODEL, F_STEP, F_MAIN],
    "loss": [F_LOSS, F_STEP, F_MAIN],
    "adam": [F_MALLOC, F_OPT, F_STEP, F_MAIN],
    "main": [F_MAIN],
    "none": [],
}
EMPTY = []  # PyTorch's one empty frames list


LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "/torch/")


def library_file(filename):
    """Whether a Python file is the framework's or another library's rather
    than the user's: anything installed as a package, PyTorch's own files
    wherever they are, the standard library, frozen modules."""
    if filename.startswith("<") or any(p in filename for p in LIBRARY_PARTS):
        return True
    parts = filename.split("/")
    # .../lib/python3.11/x.py (or /usr/lib/python3/x.py): the standard library
    return any(parts[i] == "lib" and parts[i + 1].startswith("python")
               for i in range(len(parts) - 2))


def where(frames):
    for f in frames:
        if f["filename"].endswith(".py") and not library_file(f["filename"]):
            return f"{f['filename']}:{f['line']} {f['name']}"
    for f in frames:
        if f["filename"].endswith(".py"):
            return f"{f['filename']}:{f['line']} {f['name']}"
    if frames:
        f = frames[0]
        return f"{f['filename']}:{f['line']} {f['name']}"
    return ""


class Sim:
    """The caching allocator, recording PyTorch's trace and, after every
    entry, the truth the facts are made of."""

    def __init__(self, base):
        self.segments = []  # {address, size, pool, frames, blocks: [[addr, size, req, state, frames]]}
        self.trace = []
        self.truth = []  # per entry: (active requested bytes, reserved bytes, segments, live allocations)
        self.live = {}  # addr -> (requested, frames)
        self.next_addr = base
        self.t = 1718000000000000

    def event(self, action, addr, size, frames, key="addr"):
        self.t += 7
        e = {"action": action, key: addr, "size": size, "stream": 0, "time_us": self.t}
        if frames is not None:
            e["frames"] = frames
        self.trace.append(e)
        active = sum(r for r, _ in self.live.values())
        reserved = sum(s["size"] for s in self.segments)
        pending = sum(1 for s in self.segments for b in s["blocks"] if b[3] == "active_pending_free")
        self.truth.append((active, reserved, len(self.segments), dict(self.live), pending))

    def alloc(self, req, stack):
        fr = STACKS[stack]
        size = max(512, (req + 511) // 512 * 512)
        pool = "small" if size <= MiB else "large"
        best = None
        for seg in self.segments:
            if seg["pool"] != pool:
                continue
            for i, b in enumerate(seg["blocks"]):
                if b[3] == "inactive" and b[1] >= size and (best is None or b[1] < best[0]["blocks"][best[1]][1]):
                    best = (seg, i)
        if best is None:
            if pool == "small":
                seg_size = 2 * MiB
            elif size <= 10 * MiB:
                seg_size = 20 * MiB
            else:
                seg_size = (size + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)
            seg = {"address": self.next_addr, "size": seg_size, "pool": pool, "frames": fr,
                   "blocks": [[self.next_addr, seg_size, 0, "inactive", EMPTY]]}
            self.next_addr += seg_size + 64 * MiB
            self.segments.append(seg)
            self.segments.sort(key=lambda s: s["address"])
            self.event("segment_alloc", seg["address"], seg_size, fr)
            best = (seg, 0)
        seg, i = best
        blocks = seg["blocks"]
        b = blocks[i]
        rest = b[1] - size
        if (pool == "small" and rest >= 512) or (pool == "large" and rest > MiB):
            blocks.insert(i + 1, [b[0] + size, rest, 0, "inactive", EMPTY])
        else:
            size = b[1]
        blocks[i] = [b[0], size, req, "active_allocated", fr]
        self.live[b[0]] = (req, fr)
        self.event("alloc", b[0], req, fr)
        return b[0]

    def find(self, addr):
        for seg in self.segments:
            for i, b in enumerate(seg["blocks"]):
                if b[0] == addr:
                    return seg, i
        raise AssertionError(f"no block at {addr:#x}")

    def free(self, addr, stack="main", delayed=False):
        """free_requested then free_completed; delayed: only the request
        (a stream still uses the block, as after record_stream)."""
        seg, i = self.find(addr)
        b = seg["blocks"][i]
        if delayed:
            b[3] = "active_pending_free"
        self.event("free_requested", addr, b[2], STACKS[stack])
        if not delayed:
            self.complete(addr, stack)

    def complete(self, addr, stack="main"):
        seg, i = self.find(addr)
        blocks = seg["blocks"]
        b = blocks[i]
        req = b[2]
        blocks[i] = [b[0], b[1], 0, "inactive", EMPTY]
        if i + 1 < len(blocks) and blocks[i + 1][3] == "inactive":
            blocks[i][1] += blocks[i + 1][1]
            del blocks[i + 1]
        if i > 0 and blocks[i - 1][3] == "inactive":
            blocks[i - 1][1] += blocks[i][1]
            del blocks[i]
        del self.live[addr]
        self.event("free_completed", addr, req, STACKS[stack])

    def oom(self, req, device_free):
        self.event("oom", device_free, req, STACKS["linear"], key="device_free")

    def empty_cache(self):
        for seg in list(self.segments):
            if len(seg["blocks"]) == 1 and seg["blocks"][0][3] == "inactive":
                self.segments.remove(seg)
                self.event("segment_free", seg["address"], seg["size"], STACKS["main"])

    def segment_dicts(self, device=0):
        out = []
        for seg in self.segments:
            blocks = []
            for b in seg["blocks"]:
                d = {"address": b[0], "size": b[1], "requested_size": b[2], "state": b[3]}
                d["frames"] = b[4] if b[3] != "inactive" else EMPTY
                blocks.append(d)
            allocated = sum(b[1] for b in seg["blocks"] if b[3] == "active_allocated")
            active = sum(b[1] for b in seg["blocks"] if b[3] != "inactive")
            requested = sum(b[2] for b in seg["blocks"] if b[3] == "active_allocated")
            d = {"device": device, "address": seg["address"], "total_size": seg["size"],
                 "allocated_size": allocated, "active_size": active, "requested_size": requested,
                 "stream": 0, "segment_type": seg["pool"], "segment_pool_id": (0, 0),
                 "is_expandable": False, "blocks": blocks, "frames": seg["frames"]}
            out.append(d)
        return out


def merged_index(trace):
    """Index of each entry once free_requested + free_completed pairs are
    merged; the merged pair takes the completion's truth."""
    keep = []
    for i, e in enumerate(trace):
        if (e["action"] == "free_completed" and keep and trace[keep[-1]]["action"] == "free_requested"
                and trace[keep[-1]]["addr"] == e["addr"]):
            keep[-1] = i
            continue
        keep.append(i)
    return keep


ALLOCATOR_SETTINGS = {
    "PYTORCH_CUDA_ALLOC_CONF": None, "max_split_size": -1, "garbage_collection_threshold": 0.0,
    "expandable_segments": False, "pinned_num_register_threads": 1,
    "release_lock_on_cudamalloc": False, "pinned_use_cuda_host_register": False,
    "roundup_power2_divisions": {"1": 0, "2": 0, "4": 0, "8": 0, "16": 0},
}

DROPPED = 7  # entries the ring buffer lost (max_entries)


def main_sim():
    s = Sim(0x7F0A00000000)
    w1 = s.alloc(4 * MiB + 1000, "main")          # a weight, large pool
    w2 = s.alloc(300 * KiB, "main")               # a weight, small pool
    x = s.alloc(96 * KiB + 3, "main")             # an input
    a1 = s.alloc(6 * MiB, "linear")
    s.free(x)
    a2 = s.alloc(3 * MiB + 512, "conv")
    a3 = s.alloc(700 * KiB, "linear")
    # the ring buffer keeps what follows
    g1 = s.alloc(4 * MiB + 1000, "adam")
    s.free(a3, "loss")
    t1 = s.alloc(12 * MiB + 5, "conv")            # its own segment
    s.free(a2, "loss", delayed=True)              # record_stream: pending
    a4 = s.alloc(900 * KiB, "linear")
    s.complete(a2, "loss")
    s.oom(80 * (1 << 30), 123456789)
    s.free(t1, "loss")
    m1 = s.alloc(2 * MiB, "adam")
    s.free(a1, "loss")
    s.free(w2, "main")
    s.free(a4, "main", delayed=True)              # still pending at the snapshot
    s.empty_cache()
    t2 = s.alloc(512, "loss")
    s.event("snapshot", 0, 0, None)
    del w1, g1, m1, t2
    return s


def facts(s, trace, truth):
    idx = merged_index(trace)
    active = [truth[i][0] for i in idx]
    peak = max(range(len(active)), key=lambda k: (active[k], -k))
    live = truth[idx[peak]][3]
    largest = sorted(live.items(), key=lambda kv: (-kv[1][0], kv[0]))[:3]

    def known_stack(addr, frames):
        """The stack the file holds for the allocation live at the peak: its
        alloc entry's, else (the alloc fell out of the ring buffer) that of
        the entry that frees it, else its block's."""
        for k in range(idx[peak], -1, -1):
            e = trace[k]
            if e.get("addr") == addr and e["action"] == "alloc":
                return e["frames"]
            if e.get("addr") == addr and e["action"] == "free_completed":
                break
        for e in trace[idx[peak] + 1:]:
            if e.get("addr") == addr and e["action"] in ("free_requested", "free_completed"):
                return e["frames"]
        return frames

    return {
        "events": len(idx),
        "raw_entries": len(trace),
        "active": active,
        "reserved": [truth[i][1] for i in idx],
        "segments": [truth[i][2] for i in idx],
        "pending": [truth[i][4] for i in idx],
        "peak_event": peak,
        "peak_total": active[peak],
        "largest": [{"address": a, "requested": r, "where": where(known_stack(a, fr))} for a, (r, fr) in largest],
    }


def torch_2x(s):
    trace = s.trace[DROPPED:]
    dev1 = Sim(0x7F4000000000)
    dev1.alloc(5 * MiB, "main")
    snap = {
        "segments": s.segment_dicts(0) + dev1.segment_dicts(1),
        "device_traces": [trace, []],
        "allocator_settings": ALLOCATOR_SETTINGS,
    }
    return snap, facts(s, trace, s.truth[DROPPED:])


def torch_2_0(snap):
    """The same snapshot as PyTorch 2.0 laid it out."""
    segs = []
    for seg in snap["segments"]:
        blocks = []
        for b in seg["blocks"]:
            d = {"size": b["size"], "state": b["state"]}
            if b["state"] != "inactive":
                d["history"] = [{"addr": b["address"], "real_size": b["requested_size"], "frames": b["frames"]}]
            blocks.append(d)
        segs.append({k: seg[k] for k in ("device", "address", "total_size", "allocated_size", "active_size",
                                          "requested_size", "stream", "segment_type")} | {"blocks": blocks})
    traces = [[{k: v for k, v in e.items() if k != "time_us"} for e in tr] for tr in snap["device_traces"]]
    return {"segments": segs, "device_traces": traces}


def torch_1_13(snap):
    """torch.cuda.memory_snapshot() of 1.13: the segments alone, blocks
    with their history and no requested_size."""
    out = []
    for seg in snap["segments"]:
        blocks = []
        for b in seg["blocks"]:
            d = {"size": b["size"], "state": b["state"]}
            if b["state"] != "inactive":
                d["history"] = [{"addr": b["address"], "real_size": b["requested_size"], "frames": b["frames"]}]
            blocks.append(d)
        out.append({"device": seg["device"], "address": seg["address"], "total_size": seg["total_size"],
                    "allocated_size": seg["allocated_size"], "active_size": seg["active_size"],
                    "stream": seg["stream"], "segment_type": seg["segment_type"], "blocks": blocks})
    return out


def expandable():
    """Expandable segments: one reserved range mapped and unmapped in 2 MiB
    pieces; mapped neighbours form one segment."""
    base = 0x7F8000000000
    trace, ranges, active, t = [], [], [], [1718000000000000]
    meta = {"user_metadata": ""}

    def ev(action, addr, size, frames, **extra):
        t[0] += 3
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t[0], "frames": frames}
        e.update(meta)
        e.update(extra)
        trace.append(e)
        ranges.append(mapped_now())

    mapped = set()  # mapped 2 MiB pages by index

    def mapped_now():
        out, start, prev = [], None, None
        for p in sorted(mapped):
            if start is None or p != prev + 1:
                if start is not None:
                    out.append([base + start * 2 * MiB, (prev - start + 1) * 2 * MiB])
                start = p
            prev = p
        if start is not None:
            out.append([base + start * 2 * MiB, (prev - start + 1) * 2 * MiB])
        return out

    def map_pages(first, n):
        for p in range(first, first + n):
            mapped.add(p)
        ev("segment_map", base + first * 2 * MiB, n * 2 * MiB, STACKS["main"])

    def unmap_pages(first, n):
        for p in range(first, first + n):
            mapped.discard(p)
        ev("segment_unmap", base + first * 2 * MiB, n * 2 * MiB, STACKS["main"])

    map_pages(0, 2)
    ev("alloc", base, 3 * MiB, STACKS["linear"])
    map_pages(2, 1)
    ev("alloc", base + 3 * MiB, 2 * MiB, STACKS["conv"])
    map_pages(3, 2)
    ev("alloc", base + 5 * MiB, 4 * MiB, STACKS["conv"])
    ev("free_requested", base + 5 * MiB, 4 * MiB, STACKS["loss"])
    ev("free_completed", base + 5 * MiB, 4 * MiB, STACKS["loss"])
    unmap_pages(3, 2)
    ev("free_requested", base, 3 * MiB, STACKS["loss"], user_metadata="step 1")
    ev("free_completed", base, 3 * MiB, STACKS["loss"], user_metadata="step 1")
    unmap_pages(0, 1)
    ev("snapshot", 0, 0, EMPTY)
    # final: pages 1 and 2 mapped (base+2MiB .. base+6MiB); the 2 MiB block at base+3MiB allocated
    seg = {"device": 0, "address": base + 2 * MiB, "total_size": 4 * MiB, "allocated_size": 2 * MiB,
           "active_size": 2 * MiB, "requested_size": 2 * MiB, "stream": 0, "segment_type": "large",
           "segment_pool_id": (0, 0), "is_expandable": True,
           "blocks": [
               {"address": base + 2 * MiB, "size": 1 * MiB, "requested_size": 0, "state": "inactive", "frames": EMPTY},
               {"address": base + 3 * MiB, "size": 2 * MiB, "requested_size": 2 * MiB, "state": "active_allocated",
                "frames": STACKS["conv"]},
               {"address": base + 5 * MiB, "size": 1 * MiB, "requested_size": 0, "state": "inactive", "frames": EMPTY},
           ], "frames": STACKS["main"]}
    snap = {"segments": [seg], "device_traces": [trace],
            "allocator_settings": ALLOCATOR_SETTINGS | {"expandable_segments": True}}
    idx = merged_index(trace)
    return snap, {"events": len(idx), "mapped": [ranges[i] for i in idx]}


def write(name, data):
    path = os.path.join(OUT, name)
    with open(path, "wb") as f:
        f.write(data)
    print(f"wrote {os.path.relpath(path)} ({len(data)} bytes)")


def write_json(name, v):
    write(name, (json.dumps(v, indent=1, sort_keys=True) + "\n").encode())


def generate():
    os.makedirs(OUT, exist_ok=True)
    s = main_sim()
    snap, f = torch_2x(s)
    write("torch_2x.pickle", pickle.dumps(snap, protocol=4))
    write_json("torch_2x.facts.json", f)
    write("torch_2_0.pickle", pickle.dumps(torch_2_0(snap), protocol=3))
    write("torch_1_13.pickle", pickle.dumps(torch_1_13(snap), protocol=2))
    esnap, ef = expandable()
    write("torch_expandable.pickle", pickle.dumps(esnap, protocol=5))
    write_json("torch_expandable.facts.json", ef)


# --check: what memory_viz (torch/utils/viz/MemoryViz.js) needs.

VIZ_OPCODES = {  # the opcodes its unpickle() implements
    "PROTO", "FRAME", "STOP", "MARK", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET",
    "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "DICT", "LIST", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "SETITEM", "SETITEMS", "APPEND", "APPENDS", "BININT", "BININT1", "BININT2", "LONG1",
    "SHORT_BINUNICODE", "BINUNICODE", "NEWTRUE", "NEWFALSE", "NONE", "BINFLOAT",
}


def check(path):
    with open(path, "rb") as f:
        data = f.read()
    proto = None
    for op, arg, pos in pickletools.genops(data):
        if op.name not in VIZ_OPCODES:
            raise SystemExit(f"{path}: offset {pos}: opcode {op.name} is not one memory_viz reads")
        if op.name == "PROTO":
            proto = arg
    if proto is None or not 2 <= proto <= 4:
        raise SystemExit(f"{path}: protocol {proto}; memory_viz reads 2 to 4")
    snap = pickle.loads(data)
    assert isinstance(snap, dict) and isinstance(snap["segments"], list) and isinstance(snap["device_traces"], list)
    segs = []
    for seg in snap["segments"]:
        for k, t in (("device", int), ("address", int), ("total_size", int), ("stream", int),
                     ("segment_type", str), ("blocks", list)):
            assert isinstance(seg[k], t), (k, seg[k])
        addr = seg["address"]
        for b in seg["blocks"]:
            for k, t in (("size", int), ("requested_size", int), ("state", str), ("frames", list)):
                assert isinstance(b[k], t), (k, b)
            assert b["address"] == addr, "blocks must tile their segment"
            for fr in b["frames"]:
                assert isinstance(fr["filename"], str) and isinstance(fr["line"], int) and isinstance(fr["name"], str)
            addr += b["size"]
        assert addr == seg["address"] + seg["total_size"], "blocks must tile their segment"
        segs.append([seg["address"], seg["total_size"]])
    cats = []
    for dev, trace in enumerate(snap["device_traces"]):
        for e in trace:
            assert isinstance(e["action"], str) and isinstance(e["size"], int) and isinstance(e["frames"], list)
            assert isinstance(e["device_free" if e["action"] == "oom" else "addr"], int), e
            if "category" in e and e["category"] not in cats:
                cats.append(e["category"])
        # memory_viz's segment view: undo the entries from the end; every
        # block must lie in a segment live at that moment
        live = [list(s) for s in segs if True]
        blocks = {b["address"] for seg in snap["segments"] for b in seg["blocks"] if b["state"] != "inactive"}

        def inside(a):
            return any(s <= a < s + n for s, n in live)

        for e in reversed(trace):
            act = e["action"]
            for a in blocks:
                assert inside(a), f"block {a:#x} outside every segment"
            if act in ("free_completed", "free"):
                blocks.add(e["addr"])
            elif act == "alloc":
                blocks.discard(e["addr"])
            elif act == "segment_free":
                live.append([e["addr"], e["size"]])
            elif act == "segment_alloc":
                live = [s for s in live if s[0] != e["addr"]]
            elif act not in ("free_requested", "oom", "snapshot", "step_begin", "step_end"):
                # headroom's step markers: memory_viz lists them and draws nothing
                raise SystemExit(f"{path}: action {act} is not PyTorch's")
    if cats and "unknown" not in cats:
        raise SystemExit(f"{path}: entries have categories {cats} but none is 'unknown': memory_viz would throw")
    n = sum(len(t) for t in snap["device_traces"])
    print(f"{path}: memory_viz can read it: protocol {proto}, {len(segs)} segments, {n} entries, categories {cats}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        for name in sorted(os.listdir(OUT)):
            if name.startswith("headroom_export") and name.endswith(".pickle"):
                check(os.path.join(OUT, name))
    elif sys.argv[1:]:
        raise SystemExit(__doc__)
    else:
        generate()
