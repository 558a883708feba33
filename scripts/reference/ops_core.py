#!/usr/bin/python3
"""Reference values for the core ops (PyTorch 1.13): elementwise binary ops
with broadcasting, unary ops and activations, sum/mean/amax, shape ops,
matmul/linear and float32 <-> bfloat16/float16 casts.

Run with Debian's interpreter (the one that has torch):

    /usr/bin/python3 scripts/reference/ops_core.py

It writes op/testdata/core.safetensors. For every case NAME it stores, in the
case's dtype (float32 unless the case says float64):

  NAME/x0, NAME/x1, ...   inputs, in the order the Go function takes them
  NAME/seed               the output gradient fed to backward
  NAME/y                  forward output
  NAME/g0, NAME/g1, ...   gradients of sum(y * seed) with respect to each input
  NAME/yh                 cast cases only: the bfloat16/float16 tensor itself

The case table is stored as JSON in the metadata ("cases"); the Go test
(op/core_ref_test.go) builds each op from it, so the two cannot drift.

Fills (how inputs are drawn, per input):
  randn    standard normal
  randn0   standard normal with every third element exactly 0 (kinks of
           relu, leaky_relu, abs)
  wide     4 * standard normal (saturating tails of tanh, sigmoid, gelu)
  pos      uniform in [0.5, 3) (log, sqrt, rsqrt, fractional pow)
  nonzero  +-uniform in [0.5, 2) (divisors, reciprocal, negative pow)
  ints     integers in [-2, 2] as floats, so maximum/minimum/amax see ties
  nan      integers in [-2, 2] with about a quarter NaNs at random places
           and one in the middle
           (NaN propagation and the gradients PyTorch gives around NaNs)
  bf16     special values for bfloat16 rounding (ties, overflow, subnormals,
           zeros, infinities, NaN) plus normals over many binades
  f16      the same for float16 (its subnormals, 65504 / 65520 overflow edge)
"""

import json
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from st import save  # noqa: E402  (shared safetensors writer)

OUT = os.path.normpath(os.path.join(HERE, "..", "..", "op", "testdata", "core.safetensors"))


def case(name, op, inputs, fills=None, dtype="float32", **attrs):
    inputs = [list(s) for s in inputs]
    fills = list(fills) if fills else ["randn"] * len(inputs)
    assert len(fills) == len(inputs), name
    return dict(name=name, op=op, dtype=dtype, inputs=inputs, fills=fills, **attrs)


def binary(name, op, a, b, fills=None, dtype="float32"):
    return case(name, op, [a, b], fills, dtype)


def unary(name, op, x, fill="randn", c=None, dtype="float32"):
    attrs = {} if c is None else {"c": c}
    return case(name, op, [x], [fill], dtype, **attrs)


def red(name, op, x, axes=None, keepdim=False, fill="randn", dtype="float32"):
    """axes None reduces over all axes."""
    return case(name, op, [x], [fill], dtype, axes=axes, keepdim=keepdim)


def mm(name, a, b, trans_a=False, trans_b=False, dtype="float32"):
    """a and b are the stored operand shapes (before any transpose)."""
    return case(name, "matmul", [a, b], None, dtype, trans_a=trans_a, trans_b=trans_b)


U = (3, 17)

CASES = [
    # Binary ops with broadcasting.
    binary("add_same", "add", (3, 5), (3, 5)),
    binary("add_bcast_row", "add", (2, 3, 4), (4,)),
    binary("add_bcast_both", "add", (4, 1), (1, 5)),
    binary("add_bcast_rank0", "add", (2, 3), ()),
    binary("add_bcast_mid", "add", (2, 1, 4), (3, 1)),
    binary("sub_same", "sub", (3, 5), (3, 5)),
    binary("sub_bcast", "sub", (3, 1), (2, 1, 4)),
    binary("mul_same", "mul", (3, 5), (3, 5)),
    binary("mul_bcast", "mul", (2, 3, 4), (3, 1)),
    binary("mul_bcast_rank0", "mul", (), (2, 3)),
    binary("div_same", "div", (3, 5), (3, 5), ["randn", "nonzero"]),
    binary("div_bcast", "div", (2, 3, 4), (4,), ["randn", "nonzero"]),
    binary("div_bcast_num", "div", (3, 1), (2, 3, 4), ["randn", "nonzero"]),
    binary("maximum_same", "maximum", (3, 5), (3, 5)),
    binary("maximum_ties", "maximum", (4, 6), (4, 6), ["ints", "ints"]),
    binary("maximum_ties_bcast", "maximum", (2, 3, 4), (3, 1), ["ints", "ints"]),
    binary("minimum_same", "minimum", (3, 5), (3, 5)),
    binary("minimum_ties", "minimum", (4, 6), (4, 6), ["ints", "ints"]),
    binary("minimum_ties_bcast", "minimum", (4, 1), (2, 1, 5), ["ints", "ints"]),
    # A NaN on either side gives NaN and passes the whole gradient to both.
    binary("maximum_nan", "maximum", (6, 8), (6, 8), ["nan", "nan"]),
    binary("minimum_nan_bcast", "minimum", (6, 1), (6, 8), ["nan", "nan"]),
    # Unary ops.
    unary("neg", "neg", U),
    unary("exp", "exp", U),
    unary("log", "log", U, "pos"),
    unary("sqrt", "sqrt", U, "pos"),
    unary("rsqrt", "rsqrt", U, "pos"),
    unary("tanh", "tanh", U, "wide"),
    unary("sigmoid", "sigmoid", U, "wide"),
    unary("relu", "relu", U, "randn0"),
    unary("leaky_relu_0.01", "leaky_relu", U, "randn0", c=0.01),
    unary("leaky_relu_0.2", "leaky_relu", U, "randn0", c=0.2),
    unary("silu", "silu", U, "wide"),
    unary("gelu", "gelu", U, "wide"),
    unary("gelu_tanh", "gelu_tanh", U, "wide"),
    unary("abs", "abs", U, "randn0"),
    unary("relu_nan", "relu", U, "nan"),
    unary("leaky_relu_nan", "leaky_relu", U, "nan", c=0.2),
    unary("abs_nan", "abs", U, "nan"),
    unary("square", "square", U),
    unary("pow_2.5", "pow", U, "pos", c=2.5),
    unary("pow_-1", "pow", U, "nonzero", c=-1.0),
    unary("pow_3", "pow", U, "randn", c=3.0),
    unary("reciprocal", "reciprocal", U, "nonzero"),
    unary("sin", "sin", U, "wide"),
    unary("cos", "cos", U, "wide"),
    unary("scale", "scale", U, c=0.3),
    unary("scale_neg", "scale", U, c=-2.5),
    unary("add_scalar", "add_scalar", U, c=0.7),
    unary("add_scalar_neg", "add_scalar", U, c=-1.25),
    # Reductions.
    red("sum_all", "sum", (3, 4, 5)),
    red("sum_all_keepdim", "sum", (3, 4, 5), keepdim=True),
    red("sum_axis0", "sum", (3, 4, 5), [0]),
    red("sum_axis1_keepdim", "sum", (3, 4, 5), [1], True),
    red("sum_last", "sum", (3, 4, 5), [-1]),
    red("sum_axes02", "sum", (3, 4, 5), [0, 2]),
    red("sum_axes_neg_keepdim", "sum", (2, 3, 4, 5), [-1, -3], True),
    red("sum_axes12_rank4", "sum", (2, 3, 4, 5), [1, 2]),
    red("sum_long_row", "sum", (4, 300), [1]),
    red("sum_long_col", "sum", (300, 4), [0], True),
    red("mean_all", "mean", (3, 4, 5)),
    red("mean_all_keepdim", "mean", (3, 4, 5), keepdim=True),
    red("mean_axis1", "mean", (3, 4, 5), [1]),
    red("mean_last_keepdim", "mean", (3, 4, 5), [-1], True),
    red("mean_axes_neg", "mean", (2, 3, 4, 5), [-2, 0]),
    red("mean_axes13_keepdim", "mean", (2, 3, 4, 5), [1, 3], True),
    red("amax_all", "amax", (3, 4, 5)),
    red("amax_last", "amax", (3, 4, 5), [-1]),
    red("amax_axis0_keepdim", "amax", (3, 4, 5), [0], True),
    red("amax_ties_all", "amax", (4, 5), fill="ints"),
    red("amax_ties_last", "amax", (4, 6), [-1], fill="ints"),
    red("amax_ties_axes", "amax", (2, 3, 4), [0, 2], True, fill="ints"),
    red("amax_ties_axis1", "amax", (3, 5, 2), [1], fill="ints"),
    red("amax_nan", "amax", (6, 5), [1], fill="nan"),
    # Empty reductions: a sum is 0, a mean NaN.
    red("sum_empty_axis", "sum", (0, 3), [0]),
    red("mean_empty_axis", "mean", (0, 3), [0], True),
    # Shape ops.
    case("reshape", "reshape", [(2, 3, 4)], shape=[4, 6]),
    case("reshape_infer", "reshape", [(2, 3, 4)], shape=[3, -1, 2]),
    case("flatten_all", "flatten", [(2, 3, 4)], dims=[0, -1]),
    case("flatten_tail", "flatten", [(2, 3, 4, 5)], dims=[1, -1]),
    case("flatten_mid", "flatten", [(2, 3, 4, 5)], dims=[1, 2]),
    case("permute_3d", "permute", [(2, 3, 4)], perm=[2, 0, 1]),
    case("permute_4d", "permute", [(2, 3, 4, 5)], perm=[0, 2, 3, 1]),
    case("permute_neg", "permute", [(2, 3, 4)], perm=[-1, -3, -2]),
    case("transpose_last2", "transpose", [(2, 3, 4)], dims=[-1, -2]),
    case("transpose_02", "transpose", [(2, 3, 4)], dims=[0, 2]),
    case("expand_rows", "expand", [(3, 1)], shape=[3, 5]),
    case("expand_new_axes", "expand", [(3, 1)], shape=[2, 3, 4]),
    case("expand_rank0", "expand", [()], shape=[2, 3]),
    case("expand_middle", "expand", [(2, 1, 4)], shape=[2, 3, 4]),
    # Matrix products.
    mm("matmul_2d", (4, 6), (6, 5)),
    mm("matmul_batched", (3, 4, 6), (3, 6, 5)),
    mm("matmul_bcast_rhs2d", (2, 3, 4, 5), (5, 6)),
    mm("matmul_bcast_batch", (3, 1, 4, 5), (2, 5, 6)),
    mm("matmul_bcast_lhs2d", (4, 5), (2, 5, 3)),
    mm("matmul_tn", (6, 4), (6, 5), trans_a=True),
    mm("matmul_nt", (4, 6), (5, 6), trans_b=True),
    mm("matmul_tt", (6, 4), (5, 6), trans_a=True, trans_b=True),
    mm("matmul_batched_nt", (2, 4, 6), (2, 5, 6), trans_b=True),
    mm("matmul_bcast_tn", (3, 1, 5, 4), (2, 5, 6), trans_a=True),
    mm("matmul_bcast_tt", (2, 6, 4), (3, 1, 5, 6), trans_a=True, trans_b=True),
    case("linear_bias", "linear", [(4, 6), (5, 6), (5,)]),
    case("linear_nobias", "linear", [(4, 6), (5, 6)]),
    case("linear_3d", "linear", [(2, 3, 6), (5, 6), (5,)]),
    case("linear_4d_nobias", "linear", [(2, 2, 3, 4), (3, 4)]),
    # Casts (float32 -> half type -> float32).
    case("cast_bf16", "cast", [(260,)], ["bf16"], to="bfloat16"),
    case("cast_f16", "cast", [(260,)], ["f16"], to="float16"),
    case("cast_bf16_randn", "cast", [(4, 8)], to="bfloat16"),
    case("cast_f16_randn", "cast", [(4, 8)], to="float16"),
    # float64.
    red("f64_sum_all", "sum", (3, 4, 5), dtype="float64"),
    red("f64_sum_axes_keepdim", "sum", (3, 4, 5), [0, -1], True, dtype="float64"),
    red("f64_sum_long_row", "sum", (3, 500), [1], dtype="float64"),
    red("f64_mean_all", "mean", (3, 4, 5), dtype="float64"),
    red("f64_mean_axis1", "mean", (3, 4, 5), [1], dtype="float64"),
    red("f64_mean_neg_keepdim", "mean", (2, 3, 4, 5), [-1, -3], True, dtype="float64"),
    red("f64_amax_ties", "amax", (4, 6), [-1], fill="ints", dtype="float64"),
    binary("f64_mul_bcast", "mul", (2, 3, 4), (3, 1), dtype="float64"),
    binary("f64_div_bcast", "div", (2, 3, 4), (4,), ["randn", "nonzero"], dtype="float64"),
    binary("f64_maximum_ties", "maximum", (4, 6), (6,), ["ints", "ints"], dtype="float64"),
    unary("f64_exp", "exp", U, dtype="float64"),
    unary("f64_tanh", "tanh", U, "wide", dtype="float64"),
    unary("f64_gelu", "gelu", U, "wide", dtype="float64"),
    unary("f64_pow_2.5", "pow", U, "pos", c=2.5, dtype="float64"),
    mm("f64_matmul_bcast_batch", (3, 1, 4, 5), (2, 5, 6), dtype="float64"),
]


def bits(vals):
    return torch.tensor(vals, dtype=torch.int64).to(torch.int32).view(torch.float32)


def special_bf16(n):
    v = []
    # Exact ties at the 16-bit boundary (even and odd kept bit), and one ulp
    # either side of them.
    for hi in (0x3F80, 0x3F81, 0x4049, 0x404A, 0xBF80, 0xBF81, 0x0001, 0x0080, 0x7F7E, 0x7F7F):
        b = hi << 16
        v += [b | 0x8000, b | 0x7FFF, b | 0x8001]
    v += [
        0x00000000, 0x80000000,  # +-0
        0x7F800000, 0xFF800000,  # +-inf
        0x7F7FFFFF, 0xFF7FFFFF,  # float32 max: rounds to inf
        0x00000001, 0x00007FFF, 0x00008000, 0x00018000, 0x807FFFFF,  # subnormals
        0x7FC00000, 0xFFC00000, 0x7F800001,  # NaNs (quiet, negative, signalling)
    ]
    x = bits(v)
    # Normals over many binades.
    rest = n - x.numel()
    scale = torch.pow(10.0, torch.randint(-30, 31, (rest,)).float())
    return torch.cat([x, torch.randn(rest) * scale])


def special_f16(n):
    v = []
    # Ties at the 13-bit boundary of normal halves (even and odd kept bit).
    for e in (0x3F800000, 0x3F802000, 0x47000000, 0x38800000, 0xC2F6E000):
        v += [e | 0x1000, e | 0x0FFF, e | 0x1001]
    x = bits(v)
    f = [
        0.0, -0.0, float("inf"), float("-inf"),
        65504.0, 65519.99, 65520.0, 65536.0, -70000.0, 1e10,  # overflow edge
        2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0001, 2.0 ** -26,  # subnormals
        3 * 2.0 ** -25, 5 * 2.0 ** -25, 1.5 * 2.0 ** -24, 2.0 ** -14 - 2.0 ** -25,
        6.1e-5, -3.3e-6, 1e-8, 1e-40,
    ]
    y = torch.tensor(f, dtype=torch.float32)
    z = bits([0x7FC00000, 0xFFC00000, 0x7F800001])
    x = torch.cat([x, y, z])
    rest = n - x.numel()
    scale = torch.pow(10.0, torch.randint(-9, 6, (rest,)).float())
    return torch.cat([x, torch.randn(rest) * scale])


def fill(kind, shape, dtype):
    n = 1
    for d in shape:
        n *= d
    if kind == "randn":
        x = torch.randn(shape)
    elif kind == "randn0":
        x = torch.randn(n)
        x[::3] = 0
        x = x.reshape(shape)
    elif kind == "wide":
        x = 4 * torch.randn(shape)
    elif kind == "pos":
        x = 0.5 + 2.5 * torch.rand(shape)
    elif kind == "nonzero":
        x = (0.5 + 1.5 * torch.rand(shape)) * (torch.randint(0, 2, shape) * 2 - 1)
    elif kind == "ints":
        x = torch.randint(-2, 3, shape).float()
    elif kind == "nan":
        x = torch.randint(-2, 3, shape).float()
        x[torch.rand(shape) < 0.25] = float("nan")
        x.view(-1)[n // 2] = float("nan")  # at least one
    elif kind == "bf16":
        x = special_bf16(n).reshape(shape)
    elif kind == "f16":
        x = special_f16(n).reshape(shape)
    else:
        raise ValueError(kind)
    # Draw in float32 (so the float64 cases see the same kind of values) and
    # widen exactly.
    return x.to(torch.float32).to(dtype)


def axes_arg(c, x):
    return tuple(range(x.dim())) if c["axes"] is None else tuple(c["axes"])


def forward(c, xs, out):
    op = c["op"]
    if op in ("add", "sub", "mul", "div", "maximum", "minimum"):
        fn = dict(add=torch.add, sub=torch.sub, mul=torch.mul, div=torch.div,
                  maximum=torch.maximum, minimum=torch.minimum)[op]
        return fn(xs[0], xs[1])
    x = xs[0]
    k = c.get("c")
    if op == "neg":
        return -x
    if op in ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "abs", "reciprocal", "sin", "cos"):
        return getattr(torch, op)(x)
    if op == "leaky_relu":
        return F.leaky_relu(x, k)
    if op == "silu":
        return F.silu(x)
    if op == "gelu":
        return F.gelu(x)
    if op == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if op == "square":
        return x ** 2
    if op == "pow":
        return x ** k
    if op == "scale":
        return x * k
    if op == "add_scalar":
        return x + k
    if op == "sum":
        return torch.sum(x, dim=axes_arg(c, x), keepdim=c["keepdim"])
    if op == "mean":
        return torch.mean(x, dim=axes_arg(c, x), keepdim=c["keepdim"])
    if op == "amax":
        return torch.amax(x, dim=axes_arg(c, x), keepdim=c["keepdim"])
    if op == "reshape":
        return x.reshape(c["shape"])
    if op == "flatten":
        return torch.flatten(x, c["dims"][0], c["dims"][1])
    if op == "permute":
        return x.permute(c["perm"])
    if op == "transpose":
        return x.transpose(c["dims"][0], c["dims"][1])
    if op == "expand":
        return torch.broadcast_to(x, c["shape"])
    if op == "matmul":
        a, b = xs
        if c["trans_a"]:
            a = a.transpose(-1, -2)
        if c["trans_b"]:
            b = b.transpose(-1, -2)
        return torch.matmul(a, b)
    if op == "linear":
        return F.linear(xs[0], xs[1], xs[2] if len(xs) > 2 else None)
    if op == "cast":
        h = x.to(getattr(torch, c["to"]))
        out[c["name"] + "/yh"] = h.detach()
        return h.to(x.dtype)
    raise ValueError(op)


def run(c, out):
    name = c["name"]
    dtype = getattr(torch, c["dtype"])
    xs = [fill(f, s, dtype).requires_grad_(True) for f, s in zip(c["fills"], c["inputs"])]
    y = forward(c, xs, out)
    assert y.dtype == dtype, name
    seed = torch.randn(y.shape).to(dtype)
    y.backward(seed)
    for i, x in enumerate(xs):
        out[f"{name}/x{i}"] = x.detach()
        out[f"{name}/g{i}"] = x.grad
    out[name + "/seed"] = seed
    out[name + "/y"] = y.detach().contiguous()


def main():
    torch.manual_seed(20240611)
    torch.set_num_threads(1)
    names = [c["name"] for c in CASES]
    assert len(set(names)) == len(names), "duplicate case names"
    out = {}
    for c in CASES:
        run(c, out)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    save(OUT, out, metadata={"torch": torch.__version__, "cases": json.dumps(CASES)})
    print(f"wrote {len(out)} tensors for {len(CASES)} cases to {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
