"""Minimal safetensors writer/reader for producing headroom's reference data.

Dependencies: torch (and numpy, which torch uses for .numpy()). Run with
Debian's /usr/bin/python3, which has python3-torch.

The files it writes are byte-identical to the Go writer (package
safetensors) and to the Hugging Face reference implementation: tensors are
laid out by descending dtype alignment and then by name, the JSON header is
compact, and it is padded with spaces to a multiple of 8 bytes. Keeping the
writers identical lets Go tests compare whole files, not just values.

    import st
    st.save("x.safetensors", {"w": torch.arange(6.).reshape(2, 3)},
            metadata={"source": "torch"})
    tensors, metadata = st.load("x.safetensors")
"""

import json
import os
import struct
import tempfile

import numpy as np
import torch

# torch dtype -> (safetensors code, rank in the reference Dtype enum, which is
# ordered by alignment, same-size integer dtype used to get the raw bytes).
_DTYPES = {
    torch.bool: ("BOOL", 0, torch.bool),
    torch.uint8: ("U8", 1, torch.uint8),
    torch.float16: ("F16", 7, torch.int16),
    torch.bfloat16: ("BF16", 8, torch.int16),
    torch.int32: ("I32", 9, torch.int32),
    torch.float32: ("F32", 11, torch.int32),
    torch.float64: ("F64", 12, torch.int64),
    torch.int64: ("I64", 13, torch.int64),
}
_CODES = {code: dt for dt, (code, _, _) in _DTYPES.items()}

_MAX_HEADER = 100_000_000


def _raw_bytes(t):
    """Little-endian bytes of t in row-major order, exact bit patterns."""
    _, _, raw = _DTYPES[t.dtype]
    # Viewing as a same-size integer type keeps every bit (NaN payloads,
    # bfloat16, which numpy lacks) and never converts values.
    a = t.detach().cpu().contiguous().view(raw).numpy()
    if a.dtype.itemsize > 1:
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
    return a.tobytes()


def _jstr(s):
    # ensure_ascii=False escapes exactly what serde_json and the Go writer
    # escape: '"', '\\' and control characters.
    return json.dumps(s, ensure_ascii=False)


def save(path, tensors, metadata=None):
    """Write a dict name -> torch.Tensor to path, atomically (temp + rename)."""
    items = []
    for name, t in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ValueError(f"bad tensor name {name!r}")
        if t.dtype not in _DTYPES:
            raise TypeError(f"tensor {name!r}: dtype {t.dtype} is not supported")
        items.append((name, t))
    # Descending alignment, then name: every tensor's data stays aligned to
    # its element size. Python compares str by code point, which is the same
    # order as comparing UTF-8 bytes, as Go and Rust do.
    items.sort(key=lambda it: (-_DTYPES[it[1].dtype][1], it[0]))

    parts = []
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("metadata must map str to str")
        inner = ",".join(f"{_jstr(k)}:{_jstr(metadata[k])}" for k in sorted(metadata))
        parts.append(f'"__metadata__":{{{inner}}}')
    blobs = []
    offset = 0
    for name, t in items:
        data = _raw_bytes(t)
        shape = ",".join(str(int(d)) for d in t.shape)
        code = _DTYPES[t.dtype][0]
        parts.append(
            f'{_jstr(name)}:{{"dtype":"{code}","shape":[{shape}],'
            f'"data_offsets":[{offset},{offset + len(data)}]}}'
        )
        offset += len(data)
        blobs.append(data)
    header = ("{" + ",".join(parts) + "}").encode("utf-8")
    header += b" " * (-len(header) % 8)

    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(path) + ".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(header)))
            f.write(header)
            for b in blobs:
                f.write(b)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load(path):
    """Read path; returns (dict name -> torch.Tensor, metadata dict or None).

    Checks that the tensors tile the data buffer exactly, like the Go reader.
    """
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise ValueError(f"{path}: too short")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > _MAX_HEADER or 8 + n > len(buf):
        raise ValueError(f"{path}: bad header length {n}")
    header = json.loads(buf[8 : 8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", None)
    data = buf[8 + n :]
    out = {}
    end = 0
    for name, e in sorted(header.items(), key=lambda it: tuple(it[1]["data_offsets"])):
        b, e_ = e["data_offsets"]
        dt = _CODES[e["dtype"]]
        shape = [int(d) for d in e["shape"]]
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        raw = _DTYPES[dt][2]
        size = torch.empty(0, dtype=dt).element_size()
        if b != end or e_ - b != count * size:
            raise ValueError(f"{path}: tensor {name!r}: bad data_offsets {[b, e_]}")
        end = e_
        a = np.frombuffer(data[b:e_], dtype=torch.empty(0, dtype=raw).numpy().dtype.newbyteorder("<"))
        t = torch.from_numpy(a.astype(a.dtype.newbyteorder("="))).view(dt)
        out[name] = t.reshape(shape)
    if end != len(data):
        raise ValueError(f"{path}: {len(data) - end} trailing bytes")
    return out, metadata
