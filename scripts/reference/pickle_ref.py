#!/usr/bin/python3
"""Reference pickles for package memviz/internal/pickle, and the check of the
pickles that package writes.

Run with Debian's interpreter (the one that has torch):

    /usr/bin/python3 scripts/reference/pickle_ref.py           # write references
    /usr/bin/python3 scripts/reference/pickle_ref.py --check   # check Go's files

Writing (the default) produces, in memviz/internal/pickle/testdata:

  nested_p{0..5}.pickle   nested() below, pickled with protocols 0 to 5
  snapshot_p4.pickle      snapshot(): a memory snapshot shaped like what
                          torch.cuda.memory._snapshot() returns (PyTorch 2.x
                          format), written as torch.cuda.memory._dump_snapshot
                          does, with pickle.dump and the default protocol (4)
  snapshot.json           totals of snapshot() that the Go test recomputes
  cases.json              small values (cases()) pickled with every protocol,
                          as hex; the Go test has the expected value of each
  malicious.json          pickles that would run a shell command or eval when
                          Python loads them (malicious()), in every protocol,
                          as hex; the Go test checks that each is rejected at
                          the opcode that names the class, and that nothing
                          runs. Writing them runs nothing; never load them.

Strings in nested() and snapshot() are canonicalised (equal strings are one
object), because Go's pickler shares equal strings through the memo while
Python's shares identical objects; with that, Go re-encoding what it decoded
reproduces these files byte for byte.

The Go test writes the go_*.pickle files (go test ./memviz/internal/pickle -run
TestGoWritten -update). --check then verifies, offline, that Python reads
each of them as the expected value (go_nested_p*: nested() less the parts Go
cannot hold; go_snapshot_p*: snapshot()) and that Python's own pickler,
given what it loaded, writes the identical bytes back: Go's pickler and
Python's agree byte for byte, including framing and memo numbering.

The pickles contain nothing but plain values (no classes), so reading them
back here executes nothing either.
"""

import _compat_pickle
import builtins
import json
import math
import os
import pickle
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "..", "memviz", "internal", "pickle", "testdata"))


# ---------------------------------------------------------------------------
# values


def canonical(x, strs=None, seen=None):
    """Returns x with every str replaced by one shared object per value,
    keeping the identity structure of containers (shared stays shared)."""
    if strs is None:
        strs, seen = {}, {}
    if isinstance(x, str):
        return strs.setdefault(x, x)
    if id(x) in seen:
        return seen[id(x)]
    if type(x) is list:
        out = []
        seen[id(x)] = out
        out.extend(canonical(v, strs, seen) for v in x)
        return out
    if type(x) is dict:
        out = {}
        seen[id(x)] = out
        for k, v in x.items():
            out[canonical(k, strs, seen)] = canonical(v, strs, seen)
        return out
    if type(x) is tuple:
        out = tuple(canonical(v, strs, seen) for v in x)
        seen[id(x)] = out
        return out
    if type(x) in (set, frozenset):
        out = type(x)(canonical(v, strs, seen) for v in x)
        seen[id(x)] = out
        return out
    return x


def nested():
    """The nested structure: every kind of plain value, sizes on both sides
    of each opcode's limits, batches over 1000 items, shared objects, 40
    levels of nesting, and a string and bytes over the 64 KiB frame size.
    The Go test holds the same value as a Go literal (nestedValue)."""
    shared_list = [1, 2, 3]
    shared_dict = {"k": "v"}
    deep = "bottom"
    for i in range(40):
        deep = [i, deep]
    v = {
        "none": None,
        "true": True,
        "false": False,
        "ints": [0, 1, 255, 256, 65535, 65536, -1, -128, -129, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1,
                 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 2**100, -(2**100), 2**2100, -(2**2100)],
        "floats": [0.0, -0.0, 1.5, -2.25, 1e300, 5e-324, float("inf"), float("-inf"), 0.1],
        "strings": ["", "a", "h\u00e9llo", "\u65e5\u672c\u8a9e", "emoji \U0001f389", "x" * 300,
                    "tab\tnew\nline\\back'q\"dq"],
        "bytes": [b"", b"\x00\xff", bytes(range(256)) * 2],
        "tuples": [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), ((1, (2, (3,))),), ("s", None, True, 1.5)],
        "list_long": list(range(2500)),
        "dict_long": {"k%d" % i: i for i in range(1500)},
        "dict_int_keys": {1: "one", -5: "minus five", 2**70: "big"},
        "dict_tuple_keys": {(1, "a"): [1], (): "empty", ("x", ("y", 2)): None},
        "dict_misc_keys": {None: "none", 1.5: "float", b"key": "bytes", frozenset({1, 2}): "frozen"},
        "set": {1, 2, 3},
        "empty_set": set(),
        "frozenset": frozenset({4, 5}),
        "set_of_tuples": {(1, 2), (3, 4)},
        "shared": [shared_list, shared_list, shared_dict, {"again": shared_dict}],
        "empty": [[], {}, ()],
        "deep": deep,
        "big_str": "".join(chr(0x41 + i % 26) for i in range(66000)),
        "big_bytes": bytes(i % 251 for i in range(66000)),
    }
    return canonical(v)


def go_mapping():
    """What the Go test writes from a map[string]any: keys in sorted order."""
    return {"alpha": [1, "two"], "beta": {"nested": True}, "gamma": None, "zeta": 2.5}


FILES = ["/usr/lib/python3/dist-packages/torch/nn/modules/module.py",
         "/usr/lib/python3/dist-packages/torch/nn/modules/linear.py",
         "/usr/lib/python3/dist-packages/torch/nn/modules/conv.py",
         "/usr/lib/python3/dist-packages/torch/nn/functional.py",
         "/usr/lib/python3/dist-packages/torch/optim/adam.py",
         "/usr/lib/python3/dist-packages/torch/autograd/__init__.py",
         "/home/user/project/train.py",
         "/home/user/project/model.py",
         "??"]
NAMES = ["_call_impl", "forward", "linear", "conv2d", "relu", "step", "backward", "main", "train_epoch",
         "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(int, unsigned long, CUstream_st*)",
         "at::native::empty_cuda(c10::ArrayRef<long>, c10::optional<c10::ScalarType>)"]


def snapshot():
    """A deterministic memory snapshot in the format of PyTorch 2.x
    torch.cuda.memory._snapshot(): a small caching-allocator simulation
    (segments of 2 MiB for requests up to 1 MiB, of 20 MiB above, best fit,
    block splitting, coalescing) recording its trace. Frame dicts are shared
    between tracebacks, and a block's frames list is the very list of its
    alloc event, as PyTorch's symbolizer does."""
    rng = random.Random(20240611)
    frames = [{"filename": rng.choice(FILES), "line": rng.randrange(1, 3000), "name": rng.choice(NAMES)}
              for _ in range(60)]

    def traceback():
        return [rng.choice(frames) for _ in range(rng.randrange(0, 12))]

    base = 0x7F0A3C000000
    segments = []  # dicts: address, size, pool, frames, blocks: [addr, size, req, state, frames]
    trace = []
    t = 1718000000000000
    next_addr = base

    def event(action, addr, size, fr, **extra):
        nonlocal t
        t += rng.randrange(1, 500)
        e = {"action": action, "addr": addr, "frames": fr, "size": size, "stream": 0, "time_us": t}
        e.update(extra)
        trace.append(e)

    def alloc(req):
        nonlocal next_addr
        size = max(512, (req + 511) // 512 * 512)
        if size > 1 << 20:
            size = (size + (2 << 20) - 1) // (2 << 20) * (2 << 20)
        pool = "small" if size <= 1 << 20 else "large"
        best = None
        for seg in segments:
            if seg["pool"] != pool:
                continue
            for i, b in enumerate(seg["blocks"]):
                if b[3] == "inactive" and b[1] >= size and (best is None or b[1] < best[2][best[1]][1]):
                    best = (seg, i, seg["blocks"])
        if best is None:
            seg_size = 2 << 20 if pool == "small" else max(20 << 20, size)
            fr = traceback()
            seg = {"address": next_addr, "size": seg_size, "pool": pool, "frames": fr,
                   "blocks": [[next_addr, seg_size, 0, "inactive", []]]}
            next_addr += seg_size + (2 << 20) * rng.randrange(0, 3)
            segments.append(seg)
            event("segment_alloc", seg["address"], seg_size, fr)
            best = (seg, 0, seg["blocks"])
        seg, i, blocks = best
        b = blocks[i]
        fr = traceback()
        if b[1] > size:
            blocks.insert(i + 1, [b[0] + size, b[1] - size, 0, "inactive", []])
        blocks[i] = [b[0], size, req, "active_allocated", fr]
        event("alloc", b[0], size, fr)
        return b[0]

    def free(addr):
        for seg in segments:
            blocks = seg["blocks"]
            for i, b in enumerate(blocks):
                if b[0] == addr:
                    event("free_requested", addr, b[1], traceback())
                    event("free_completed", addr, b[1], traceback())
                    blocks[i] = [b[0], b[1], 0, "inactive", []]
                    # coalesce with free neighbours
                    j = i
                    if j + 1 < len(blocks) and blocks[j + 1][3] == "inactive":
                        blocks[j][1] += blocks[j + 1][1]
                        del blocks[j + 1]
                    if j > 0 and blocks[j - 1][3] == "inactive":
                        blocks[j - 1][1] += blocks[j][1]
                        del blocks[j]
                    return
        raise AssertionError("free of unknown address")

    live = []
    for step in range(700):
        if live and rng.random() < 0.45:
            free(live.pop(rng.randrange(len(live))))
        else:
            req = rng.choice([rng.randrange(1, 4096), rng.randrange(4096, 1 << 20), rng.randrange(1 << 20, 48 << 20)])
            live.append(alloc(req))
        if step == 350:
            event("oom", 0, 80 << 30, traceback(), device_free=123456)
    # an empty cache: release whole free segments, as torch.cuda.empty_cache() does
    for seg in list(segments):
        if len(seg["blocks"]) == 1 and seg["blocks"][0][3] == "inactive":
            event("segment_free", seg["address"], seg["size"], traceback())
            segments.remove(seg)
    event("snapshot", 0, 0, [])

    out_segments = []
    for seg in segments:
        blocks = [{"address": b[0], "size": b[1], "requested_size": b[2], "state": b[3], "frames": b[4]}
                  for b in seg["blocks"]]
        allocated = sum(b[1] for b in seg["blocks"] if b[3] == "active_allocated")
        requested = sum(b[2] for b in seg["blocks"] if b[3] == "active_allocated")
        out_segments.append({
            "device": 0, "address": seg["address"], "total_size": seg["size"], "allocated_size": allocated,
            "active_size": allocated, "requested_size": requested, "stream": 0,
            "segment_type": seg["pool"], "segment_pool_id": (0, 0), "is_expandable": False,
            "frames": seg["frames"], "blocks": blocks,
        })
    snap = {
        "segments": out_segments,
        "device_traces": [trace, []],
        "allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": None, "max_split_size": -1, "garbage_collection_threshold": 0.0,
            "expandable_segments": False, "pinned_num_register_threads": 1,
            "release_lock_on_cudamalloc": False, "pinned_use_cuda_host_register": False,
            "roundup_power2_divisions": {"1": 0, "2": 0, "4": 0, "8": 0, "16": 0},
        },
    }
    return canonical(snap)


def snapshot_summary(s):
    trace = s["device_traces"][0]
    actions = {}
    for e in trace:
        actions[e["action"]] = actions.get(e["action"], 0) + 1
    blocks = [b for seg in s["segments"] for b in seg["blocks"]]
    return {
        "segments": len(s["segments"]),
        "blocks": len(blocks),
        "events": len(trace),
        "actions": actions,
        "total_size": sum(seg["total_size"] for seg in s["segments"]),
        "allocated_size": sum(seg["allocated_size"] for seg in s["segments"]),
        "requested_size": sum(seg["requested_size"] for seg in s["segments"]),
        "distinct_frames": len({id(f) for e in trace for f in e["frames"]}
                               | {id(f) for b in blocks for f in b["frames"]}
                               | {id(f) for seg in s["segments"] for f in seg["frames"]}),
        "frames_in_events": sum(len(e["frames"]) for e in trace),
        "max_address": max(seg["address"] for seg in s["segments"]),
        "last_time_us": trace[-1]["time_us"],
    }


def cases():
    """Small values, each pickled with protocols 0..5 (cases.json). The Go
    test holds the expected value of each name."""
    return [
        ("none", None), ("true", True), ("false", False),
        ("int0", 0), ("int255", 255), ("int256", 256), ("int65536", 65536), ("neg1", -1),
        ("int2_31", 2**31), ("int_min64", -(2**63)), ("int2_64", 2**64), ("int_big_neg", -(2**100) + 7),
        ("float", 1.25), ("float_neg_zero", -0.0), ("float_inf", float("inf")), ("float_tiny", 5e-324),
        ("str_empty", ""), ("str_unicode", "h\u00e9llo \u65e5\u672c \U0001f389"),
        ("str_escapes", "a\\b\nc\u0000d\u20ac\\u1234"),
        ("bytes_empty", b""), ("bytes", b"\x00\x01\xfe\xff"), ("bytes_ascii", b"abc"),
        ("bytearray", bytearray(b"\x00ab\xff")), ("bytearray_empty", bytearray()),
        ("tuple0", ()), ("tuple1", (1,)), ("tuple2", (1, "a")), ("tuple3", (1, 2, 3)), ("tuple5", (1, 2, 3, 4, 5)),
        ("list", [1, [2, [3]], "x"]), ("dict", {"a": 1, "b": [2, 3], "c": {"d": None}}),
        ("set", {7}), ("frozenset", frozenset({8})), ("set_empty", set()),
        ("shared", (lambda l: [l, l, (l,)])([1])),
    ]


class _Reduce:
    """An object whose pickle calls func(*args) when loaded."""

    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def malicious():
    """(name, value, class the pickle names first). Pickling these only
    records the names of os.system and friends; loading them would run."""
    return [
        ("os_system", _Reduce(os.system, ("echo pwned",)), "posix.system"),
        ("eval", _Reduce(builtins.eval, ("__import__('os').system('echo pwned')",)), "builtins.eval"),
        ("nested", {"ok": [1, 2], "payload": _Reduce(os.system, ("echo pwned",))}, "posix.system"),
        ("subprocess", _Reduce(subprocess.check_output, (["echo", "pwned"],)), "subprocess.check_output"),
    ]


def written_name(cls, proto):
    """The name a pickle of the given protocol spells cls with: protocols
    0 to 2 use Python 2's names where they differ (fix_imports)."""
    module, name = cls.rsplit(".", 1)
    if proto < 3:
        if (module, name) in _compat_pickle.REVERSE_NAME_MAPPING:
            module, name = _compat_pickle.REVERSE_NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.REVERSE_IMPORT_MAPPING:
            module = _compat_pickle.REVERSE_IMPORT_MAPPING[module]
    return module + "." + name


# ---------------------------------------------------------------------------
# comparison


def same(a, b, path="$"):
    """Strict equality: same types (bytes for bytearray allowed only where
    the caller passes bytes), floats by bits (nan == nan), dicts in order."""
    if type(a) is not type(b):
        raise AssertionError(f"{path}: type {type(a).__name__} != {type(b).__name__}")
    if isinstance(a, float):
        if not (a == b and math.copysign(1, a) == math.copysign(1, b)) and not (math.isnan(a) and math.isnan(b)):
            raise AssertionError(f"{path}: {a!r} != {b!r}")
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            raise AssertionError(f"{path}: length {len(a)} != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            raise AssertionError(f"{path}: keys {list(a.keys())[:5]}... != {list(b.keys())[:5]}...")
        for k in a:
            same(a[k], b[k], f"{path}[{k!r}]")
    elif a != b:
        raise AssertionError(f"{path}: {a!r:.80} != {b!r:.80}")


def write(name, data):
    path = os.path.join(OUT, name)
    with open(path, "wb") as f:
        f.write(data)
    print(f"wrote {os.path.relpath(path)} ({len(data)} bytes)")


def generate():
    os.makedirs(OUT, exist_ok=True)
    n = nested()
    for proto in range(6):
        data = pickle.dumps(n, protocol=proto)
        same(pickle.loads(data), n)
        write(f"nested_p{proto}.pickle", data)

    s = snapshot()
    path = os.path.join(OUT, "snapshot_p4.pickle")
    # what torch.cuda.memory._dump_snapshot does
    with open(path, "wb") as f:
        pickle.dump(s, f)
    print(f"wrote {os.path.relpath(path)} ({os.path.getsize(path)} bytes)")
    with open(os.path.join(OUT, "snapshot.json"), "w") as f:
        json.dump(snapshot_summary(s), f, indent=1, sort_keys=True)
        f.write("\n")

    out = []
    for name, value in cases():
        for proto in range(6):
            data = pickle.dumps(value, protocol=proto)
            out.append({"name": name, "protocol": proto, "hex": data.hex(),
                        # Go cannot tell bytearray from bytes, so re-encoding
                        # those gives bytes, not the same pickle
                        "reencode": proto >= 2 and not name.startswith("bytearray")})
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"python": sys.version.split()[0], "cases": out}, f, indent=0)
        f.write("\n")
    print(f"wrote {len(out)} cases")

    out = []
    for name, value, cls in malicious():
        for proto in range(6):
            out.append({"name": name, "protocol": proto, "class": written_name(cls, proto),
                        "hex": pickle.dumps(value, protocol=proto).hex()})
    with open(os.path.join(OUT, "malicious.json"), "w") as f:
        json.dump({"python": sys.version.split()[0], "cases": out}, f, indent=0)
        f.write("\n")
    print(f"wrote {len(out)} malicious pickles")


def check():
    expected = {
        "go_nested_p2.pickle": (2, nested()),
        "go_nested_p3.pickle": (3, nested()),
        "go_nested_p4.pickle": (4, nested()),
        "go_nested_p5.pickle": (5, nested()),
        "go_snapshot_p2.pickle": (2, snapshot()),
        "go_snapshot_p4.pickle": (4, snapshot()),
        "go_mapping_p4.pickle": (4, go_mapping()),
    }
    failed = 0
    for name, (proto, want) in expected.items():
        path = os.path.join(OUT, name)
        with open(path, "rb") as f:
            data = f.read()
        try:
            if data[:2] != bytes([0x80, proto]):
                raise AssertionError(f"starts with {data[:2]!r}, want PROTO {proto}")
            got = pickle.loads(data)
            same(got, want)
            again = pickle.dumps(got, protocol=proto)
            if again != data:
                i = next((i for i, (x, y) in enumerate(zip(again, data)) if x != y), min(len(again), len(data)))
                raise AssertionError(f"Python re-pickles to different bytes: first difference at offset {i} "
                                     f"(python {again[i:i + 16]!r}, go {data[i:i + 16]!r}), "
                                     f"lengths {len(again)} vs {len(data)}")
            print(f"ok   {name}: {len(data)} bytes, loads as expected, identical to Python's pickle.dumps")
        except AssertionError as e:
            failed += 1
            print(f"FAIL {name}: {e}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        check()
    elif sys.argv[1:]:
        sys.exit(__doc__)
    else:
        generate()
