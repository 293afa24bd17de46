"""accel's Triton linear cross-entropy kernel: its conds on meta and fake-CUDA tensors, and, in Triton's
interpreter on CPU (a subprocess: ``TRITON_INTERPRET=1`` must be set before Triton is imported), its numerics
against the eager chunked reference with NaN-poisoned outputs and the register -> route -> unregister round
trip through accel's op and, where torch has them (2.13+ builds), torch's own chunked ops, against torch's
reference path (``options=None``).
"""

from __future__ import annotations

import importlib.util
import textwrap
import warnings

import pytest
import torch

from accel.kernels.ops import conds as ops_conds
from accel.kernels.ops.linear_cross_entropy import conditions
from _kernel_helpers import interpreted_report, meta_floors  # noqa: F401 (fixture)


@pytest.fixture(autouse=True)
def _meta_floors(meta_floors):
    """The meta arch declares the 2**20 floors (:func:`_kernel_helpers.meta_floors`)."""
    return meta_floors

pytestmark = pytest.mark.cpu

N, D, C = 4096, 512, 32000  # above the tuning floor (2**20 input elements)


def _meta(*shape, dtype=torch.bfloat16, device="meta"):
    return torch.empty(*shape, dtype=dtype, device=device)


def _args(dtype=torch.bfloat16, device="meta", **over):
    a = {"input": _meta(N, D, dtype=dtype, device=device), "linear_weight": _meta(C, D, dtype=dtype, device=device),
         "target": _meta(N, dtype=torch.long, device=device), "linear_bias": None, "weight": None, "reduction": "mean",
         "ignore_index": -100, "label_smoothing": 0.0, "batch_chunk_size": 256, "acc_policy": "compact",
         "acc_dtype": torch.float32 if dtype != torch.float32 else dtype, "allow_retain_graph": False,
         "compute_input_grad": True, "compute_linear_weight_grad": True, "compute_linear_bias_grad": False}
    a.update(over)
    return tuple(a.values())


def test_cond_takes_supported_calls_and_says_why_not_on_meta():
    """The forward and backward conds on meta tensors: every supported dtype and target kind is taken; each
    rejection has its reason (what explain shows); small calls stay under the tuning floor."""
    fwd, bwd = conditions.make_conds("triton", ["meta"])
    assert fwd.cacheable and fwd.floor() > 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        assert fwd(*_args(dtype)) and fwd.why_not(*_args(dtype)) is None
    assert fwd(*_args(target=_meta(N, C)))  # probabilities in the input's dtype
    assert fwd(*_args(linear_bias=_meta(C), weight=_meta(C, dtype=torch.float32), reduction="none", label_smoothing=0.1))
    rejected = {
        "dtype": _args(torch.float64, acc_dtype=torch.float64),
        "int64 [N]": _args(target=_meta(N, dtype=torch.int32)),
        "row-contiguous": _args(target=_meta(C, N).t()),
        "linear_weight differs": _args(linear_weight=_meta(C, D, dtype=torch.float16)),
        "linear_bias is not": _args(linear_bias=_meta(C + 1)),
        "class weight": _args(weight=_meta(7)),
        "acc_policy": _args(acc_policy="auto"),
        "not [N, D]": _args(linear_weight=_meta(C, D + 1)),
        "kernel's floor": _args(input=_meta(8, D), target=_meta(8, dtype=torch.long)),  # small: the eager loop
    }
    for fragment, args in rejected.items():
        assert not fwd(*args)
        assert fragment in fwd.why_not(*args), (fragment, fwd.why_not(*args))
    other = conditions.make_conds("triton", ["cuda"])[0]
    assert "not served" in other.why_not(*_args())
    grad = _meta(N, dtype=torch.float32)
    bargs = (grad, *_args()[:5], -100, 0.0, 256, "compact", torch.float32, True, True, False)
    assert bwd(*bargs) and bwd.why_not(*bargs) is None
    assert "grad_loss" in bwd.why_not(_meta(3, dtype=torch.float32), *bargs[1:])


def test_torch_nn_cond_leaves_upstreams_cases_to_upstream(monkeypatch):
    """torch's ``_linear_cross_entropy_batch_chunked`` on (fake) NVIDIA sm_90 tensors: while torch's registry
    holds its CuTeDSL override of the op, accel's cond declines exactly what that override's gate takes
    (bf16/fp16, compact, fp32 accumulation, int64 targets, mean/sum, no smoothing) and takes the rest
    (fp32, probabilities, smoothing, accurate); with no upstream override it takes all of them."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    monkeypatch.setattr(ops_conds, "arch", lambda device: "sm_90")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.version, "hip", None)
    upstream = {"names": frozenset({"_linear_cross_entropy_batch_chunked"})}
    scalar, none = conditions.make_torch_nn_conds("triton", ["cuda"], lambda: upstream["names"])
    with FakeTensorMode(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        theirs = _args(device="cuda")
        assert not scalar(*theirs) and "CuTeDSL" in scalar.why_not(*theirs)
        assert not scalar(*_args(torch.float16, device="cuda"))
        ours = [_args(torch.float32, device="cuda"), _args(device="cuda", label_smoothing=0.1),
                _args(device="cuda", acc_policy="accurate"),
                _args(device="cuda", target=_meta(N, C, device="cuda"))]
        assert all(scalar(*a) for a in ours)
        a = _args(device="cuda")
        none_args = (*a[:5], -100, 256, "compact", torch.float32)
        assert none(*none_args)  # upstream's override of the no-reduction op is its eager body: accel's first
        upstream["names"] = frozenset()
        assert scalar(*theirs)


# ------------------------------------------------------------------------------ interpreter runs
SCRIPT = textwrap.dedent(r"""
    import json, sys, warnings, torch
    import torch.nn.functional as TF
    before = "triton" in sys.modules
    import accel.kernels as ak
    from accel._compat import nn as compat_nn
    from accel.kernels.dsl import launch
    from accel.kernels.tuning import table
    from accel.kernels.ops.linear_cross_entropy import reference, tiled, triton_impl, triton_kernel
    from accel.nn import linear_cross_entropy as own
    launch.poison_outputs = True           # unwritten outputs stay NaN and fail the comparison
    table.MIN_NUMEL["triton"] = 0          # tiny interpreter shapes must route
    small = triton_kernel.default_config
    triton_kernel.default_config = lambda v: {"block_v": 32, "num_warps": 4}  # rows of several blocks
    report = {"numerics": [], "routing": {}}
    g = torch.Generator().manual_seed(0)

    def compare(got, want, dtype):
        tol = 1e-5 if dtype == torch.float32 else 2e-2
        out = []
        for a, b in zip(got, want):
            if a.shape != b.shape or a.dtype != b.dtype:
                return f"shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
            a, b = a.double(), b.double()
            if not torch.equal(a.isnan(), b.isnan()):
                return "NaN pattern differs"
            scale = max(float(b.nan_to_num().abs().max()) if b.numel() else 0.0, 1.0)
            out.append(float((a - b).nan_to_num().abs().max()) / scale if a.numel() else 0.0)
        worst = max(out)
        return None if worst <= tol else f"relative error {worst}"

    n, d, c = 7, 8, 70
    shape_of = tiled.tile_shape
    cases = [  # (dtype, target kind, label smoothing, class weight, bias, reduction, policy, softcap, z-loss)
        (torch.float32, "index", 0.0, False, True, "mean", "compact", 0.0, 0.0),
        (torch.float32, "index", 0.2, True, False, "sum", "compact", 0.0, 0.0),
        (torch.float32, "prob", 0.0, True, True, "mean", "compact", 0.0, 0.0),
        (torch.float32, "prob", 0.2, False, False, "none", "compact", 0.0, 0.0),
        (torch.float32, "invalid", 0.0, False, False, "none", "compact", 0.0, 0.0),
        (torch.bfloat16, "index", 0.0, False, True, "mean", "compact", 0.0, 0.0),
        (torch.bfloat16, "index", 0.1, True, True, "none", "accurate", 0.0, 0.0),
        (torch.float16, "prob", 0.0, False, False, "sum", "accurate", 0.0, 0.0),
        (torch.float32, "ignored", 0.0, False, True, "mean", "compact", 0.0, 0.0),
        # the final-logit softcap (logits of about +-3 against caps of 1.5-3: tanh well off its linear part)
        (torch.float32, "index", 0.1, True, True, "mean", "compact", 2.0, 0.01),
        (torch.bfloat16, "index", 0.0, False, False, "none", "accurate", 3.0, 0.0),
        (torch.float32, "prob", 0.0, False, True, "sum", "compact", 1.5, 0.05),
        # a cap far above the logits: tanh near 0, where 1 - 2 / (exp(2x) + 1) alone lost 7e-2 of the loss
        (torch.float32, "index", 0.0, False, False, "none", "compact", 1e6, 0.0),
        # z-loss keeps a row whose target's class weight is 0 (its cross-entropy term is 0, its z-loss is not)
        (torch.float32, "zero_weight", 0.0, True, False, "mean", "compact", 0.0, 0.1),
    ]
    for dtype, kind, ls, has_cw, has_b, reduction, policy, cap, zl in cases:
        x = torch.randn(n, d, generator=g).to(dtype)
        w = torch.randn(c, d, generator=g).to(dtype)
        b = torch.randn(c, generator=g).to(dtype) if has_b else None
        cw = torch.rand(c, generator=g) + 0.5 if has_cw else None
        if kind == "prob":
            t = torch.randn(n, c, generator=g).softmax(1).to(dtype)
        else:
            t = torch.randint(0, c, (n,), generator=g)
            t[1] = -100
            if kind == "invalid":
                t[3] = c + 5
            if kind == "ignored":
                t[:] = -100
            if kind == "zero_weight":
                cw[t[2]] = 0.0
        acc = torch.float32
        args = (x, w, t, b, cw, reduction, -100, ls, 4, policy, acc, False, True, True, has_b, cap, zl)
        go = torch.rand(n, generator=g)
        bargs = (go, x, w, t, b, cw, -100, ls, 4, policy, acc, True, True, has_b, cap, zl)
        for schedule in ("rows", "tiles"):
            # tiles: 2 row blocks (4 and 3 rows) x 3 vocabulary tiles (32, 32 and 6 classes)
            tiled.tile_shape = (lambda *a: (4, 32)) if schedule == "tiles" else shape_of
            problem = compare(triton_impl.linear_cross_entropy(*args, schedule=schedule), reference.forward(*args),
                              dtype)
            report["numerics"].append(dict(case=[str(dtype), kind, ls, has_cw, has_b, reduction, policy, cap, zl,
                                                 "fwd", schedule], problem=problem))
            if reduction == "none":
                problem = compare(triton_impl.linear_cross_entropy_backward(*bargs, schedule=schedule),
                                  reference.backward(*bargs), dtype)
                report["numerics"].append(dict(case=[str(dtype), kind, ls, has_cw, has_b, reduction, policy, cap, zl,
                                                     "bwd", schedule], problem=problem))
        tiled.tile_shape = shape_of
    triton_kernel.default_config = small

    # the coefficient launch against the eager coefficients (fp32, every field), and the in-place scale
    coef_cases = []
    for reduction, ls, has_cw, go, zl in (("mean", 0.0, False, False, 0.0), ("mean", 0.2, True, False, 0.0),
                                          ("sum", 0.1, False, False, 0.0), ("none", 0.3, True, True, 0.0),
                                          ("mean", 0.0, True, False, 0.0), ("mean", 0.1, True, False, 0.01),
                                          ("none", 0.0, False, True, 0.02)):
        t = torch.randint(0, 50, (2500,), generator=g)   # rows of three coefficient blocks
        t[::7] = -100
        t[5] = 77                                         # out of range: NaN
        cw = torch.rand(50, generator=g) + 0.5 if has_cw else None
        gl = torch.rand(2500, generator=g) if go else None
        got = triton_impl.coefficients(t, cw, reduction, -100, ls, 50, torch.float32, gl, 0.0, zl)
        want = reference.coefficients(t, cw, reduction, -100, ls, 50, torch.float32, gl, 0.0, zl)
        worst = 0.0
        for name in ("target", "a", "b", "bw", "class_weight", "empty", "zc"):
            x_, y_ = getattr(got, name), getattr(want, name)
            if (x_ is None) != (y_ is None):
                worst = float("inf")
            elif x_ is not None:
                same_nan = torch.equal(x_.isnan(), y_.isnan()) if x_.is_floating_point() else True
                err = float((x_.double() - y_.double()).nan_to_num().abs().max()) if x_.numel() else 0.0
                worst = max(worst, err if same_nan and x_.dtype == y_.dtype else float("inf"))
        coef_cases.append(worst)
    # a strided class weight (every other element of a longer vector): the kernels read a dense copy
    xs, ws = torch.randn(7, 8, generator=g), torch.randn(70, 8, generator=g)
    ts = torch.randint(0, 70, (7,), generator=g)
    cws = (torch.rand(140, generator=g) + 0.5)[::2]
    sargs = (xs, ws, ts, None, cws, "mean", -100, 0.1, 4, "compact", torch.float32, False, True, True, False)
    report["strided_class_weight"] = compare(triton_impl.linear_cross_entropy(*sargs), reference.forward(*sargs),
                                             torch.float32)
    all_ignored = torch.full((9,), -100)
    e = triton_impl.coefficients(all_ignored, None, "mean", -100, 0.0, 50)
    report["coefficients"] = {"errors": coef_cases, "all_ignored_empty": bool(e.empty), "a": e.a.tolist()}
    v = torch.randn(5000, generator=g)
    before_v = v.clone()
    triton_impl.scale_(v, torch.tensor(1.0))
    one_same = torch.equal(v, before_v)
    triton_impl.scale_(v, torch.tensor(0.37))
    h = before_v.to(torch.bfloat16)
    triton_impl.scale_(h, torch.tensor(0.37))
    # the interpreter's fp32 -> bf16 conversion truncates (the GPU's rounds to nearest): within one bf16 step
    bf16_err = float(((h.float() - before_v.to(torch.bfloat16).float() * 0.37).abs()
                      / (before_v.abs() * 0.37).clamp_min(1e-30)).max())
    report["scale"] = {"one_unchanged": one_same, "scaled_equal": torch.equal(v, before_v * 0.37),
                       "bf16_within_a_step": bf16_err <= 2 ** -7}

    # register -> route (accel's op; torch's own ops where torch has them) -> unregister
    names = triton_impl.register(["cpu"])
    report["routing"]["names"] = names
    report["routing"]["triton_before_first_launch"] = before
    info = {o.name: o for o in ak.overrides()}
    report["routing"]["paths"] = {k: info[k].paths for k in names}
    x = torch.randn(9, 16, generator=g, requires_grad=True)
    w = torch.randn(50, 16, generator=g, requires_grad=True)
    b = torch.randn(50, generator=g, requires_grad=True)
    t = torch.randint(0, 50, (9,), generator=g)
    t[0] = -100

    def grads(loss):
        return [v.detach() for v in torch.autograd.grad(loss, (x, w, b))]

    def diff(a, bb):
        return max(float((p - q).abs().max()) for p, q in zip(a, bb))

    ref = TF.cross_entropy(TF.linear(x, w, b), t)
    ref_g = grads(ref)
    got = own.linear_cross_entropy(x, w, t, linear_bias=b, options=own.LinearCrossEntropyOptions(batch_chunk_size=4))
    report["routing"]["accel_op"] = [abs(float(got) - float(ref)), diff(grads(got), ref_g)]
    got = own.linear_cross_entropy(x, w, t, linear_bias=b, options=own.LinearCrossEntropyOptions(batch_chunk_size=4))
    report["routing"]["accel_op_scaled"] = diff(grads(got * 3.0), [3.0 * r for r in ref_g])
    from accel.kernels.ops.linear_cross_entropy import op as lce_op
    report["routing"]["device_scale"] = lce_op._device_scale(torch.tensor(3.0), [None]) is triton_impl.scale_
    with ak.disabled():
        report["routing"]["device_scale_disabled"] = lce_op._device_scale(torch.tensor(3.0), [None])
    none = own.linear_cross_entropy(x, w, t, linear_bias=b, reduction="none",
                                    options=own.LinearCrossEntropyOptions(batch_chunk_size=4))
    report["routing"]["accel_op_none"] = diff(grads(none.sum()), grads(TF.cross_entropy(TF.linear(x, w, b), t,
                                                                                       reduction="sum")))
    args = (x.detach(), w.detach(), t, None, None, "mean", -100, 0.0, 4, "compact", torch.float32, False, True, True,
            False)
    report["routing"]["explain"] = ak.explain(torch.ops.accel.linear_cross_entropy.default, *args).kernel
    theirs = compat_nn.torch_linear_cross_entropy()
    if theirs is not None:
        F_lce, _, Options = theirs
        torch_ref = F_lce(x, w, t, linear_bias=b)            # torch's reference path
        torch_ref_g = grads(torch_ref)
        got = F_lce(x, w, t, linear_bias=b, options=Options(batch_chunk_size=4))
        report["routing"]["torch_op"] = [abs(float(got) - float(torch_ref)), diff(grads(got), torch_ref_g),
                                         str(got.dtype)]
        got = F_lce(x, w, t, linear_bias=b, reduction="none", options=Options(batch_chunk_size=4))
        report["routing"]["torch_op_none"] = float((got - F_lce(x, w, t, linear_bias=b, reduction="none")).abs().max())
    info = {o.name: o for o in ak.overrides()}
    report["routing"]["routed"] = {k: info[k].routed for k in names}
    report["routing"]["failed"] = {k: info[k].failed for k in names}
    for k in names:
        ak.unregister(k)
    own.linear_cross_entropy(x, w, t, options=own.LinearCrossEntropyOptions())
    report["routing"]["after_unregister"] = [o.name for o in ak.overrides()]
    print("REPORT" + json.dumps(report))
""")


@pytest.fixture(scope="module")
def interpreted():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed (tox envs install it)")
    return interpreted_report(SCRIPT)


def test_interpreted_kernel_matches_the_chunked_reference(interpreted):
    """The Triton row step in the chunk loop, and the Triton tile steps in the tiled schedule (two row blocks,
    three vocabulary tiles), equal the eager chunk loop: index and probability targets, label smoothing, class
    weight, bias, every reduction and the ``"none"`` backward, compact and accurate, fp32, bf16 and fp16;
    ignored rows (skipped by the kernels), an out-of-range row (NaN, no read outside the row), rows of several
    blocks; the final-logit softcap and the z-loss (alone and together, index and probability targets, a row
    kept by its z-loss alone); every output NaN-poisoned before."""
    numerics = interpreted["numerics"]
    assert len(numerics) == 38 and {e["case"][-1] for e in numerics} == {"rows", "tiles"}
    assert {(e["case"][7], e["case"][8]) for e in numerics} >= {(2.0, 0.01), (3.0, 0.0), (1.5, 0.05), (0.0, 0.1)}
    assert [e for e in numerics if e["problem"] is not None] == []


def test_interpreted_coefficients_and_scale_match_the_eager_ones(interpreted):
    """The one-program coefficient launch equals :func:`reference.coefficients` field by field (every reduction,
    label smoothing, class weight, ``reduction="none"``'s ``grad_loss``, ignored and out-of-range rows over
    three blocks; all rows ignored under ``"mean"`` flags ``empty``); a strided class weight gives the eager
    loop's loss and gradients; the in-place scale leaves a gradient
    untouched for a scale of 1 and otherwise equals ``g * s`` (fp32; bf16 within one step)."""
    c = interpreted["coefficients"]
    assert all(err <= 1e-6 for err in c["errors"]), c["errors"]
    assert c["all_ignored_empty"] is True and c["a"] == [0.0] * 9
    assert interpreted["scale"] == {"one_unchanged": True, "scaled_equal": True, "bf16_within_a_step": True}
    assert interpreted["strided_class_weight"] is None  # a strided class weight equals the eager loop too


def test_interpreted_round_trip_register_route_unregister(interpreted):
    """``triton_impl.register(["cpu"])`` installs accel's forward and backward and, where torch has them, its
    overrides of torch's chunked ops; accel's function (chunked) and torch's own (where present) then run the
    kernel with the reference path's loss and gradients; unregistering leaves nothing behind. Triton is not
    imported before the first launch."""
    r = interpreted["routing"]
    from accel._compat import nn as compat_nn

    has_torch_nn = bool(compat_nn.torch_nn_chunked_ops())
    expected = ["linear_cross_entropy_fwd.triton", "linear_cross_entropy_bwd.triton"]
    if has_torch_nn:
        expected += ["linear_cross_entropy_torch_nn.triton", "linear_cross_entropy_torch_nn_none.triton"]
    assert r["names"] == expected
    assert r["triton_before_first_launch"] is False
    assert all(set(p) == {"CPU"} for p in r["paths"].values())
    loss_err, grad_err = r["accel_op"]
    assert loss_err < 1e-5 and grad_err < 1e-5 and r["accel_op_none"] < 1e-5
    assert r["explain"] == "linear_cross_entropy_fwd.triton"
    assert r["accel_op_scaled"] < 1e-5  # the backward's scale of 3, read on the device by the Triton impl's launch
    assert r["device_scale"] is True and r["device_scale_disabled"] is None  # kernels off: the host read
    assert r["routed"]["linear_cross_entropy_fwd.triton"] == 3 and r["routed"]["linear_cross_entropy_bwd.triton"] == 1
    if has_torch_nn:
        loss_err, grad_err, dtype = r["torch_op"]
        assert loss_err < 1e-5 and grad_err < 1e-5 and dtype == "torch.float32"
        assert r["torch_op_none"] < 1e-5
        assert r["routed"]["linear_cross_entropy_torch_nn.triton"] == 1
        assert r["routed"]["linear_cross_entropy_torch_nn_none.triton"] >= 1
    assert all(v == 0 for v in r["failed"].values())
    assert r["after_unregister"] == []


# ------------------------------------------------------------------------------ the tiled schedule, eager
@pytest.mark.parametrize("dtype,kind,ls,has_cw,has_b,policy", [
    (torch.float32, "index", 0.0, False, True, "compact"),
    (torch.float32, "index", 0.2, True, False, "compact"),
    (torch.float32, "prob", 0.1, True, True, "compact"),
    (torch.bfloat16, "index", 0.1, True, True, "compact"),
    (torch.bfloat16, "ignored", 0.0, False, False, "accurate"),
    (torch.float16, "prob", 0.0, False, False, "accurate"),
])
def test_tiled_schedule_equals_the_row_chunked_loop(dtype, kind, ls, has_cw, has_b, policy):
    """The eager tile steps in the tiled schedule (row blocks x vocabulary tiles, the last of each partial)
    give the row-chunked loop's losses and gradients (input, weight, bias) for index and probability targets,
    smoothing, class weight, bias, every row ignored, compact and accurate."""
    from accel.kernels.ops.linear_cross_entropy import reference, tiled

    g = torch.Generator().manual_seed(1)
    n, d, c = 11, 16, 90
    x, w = torch.randn(n, d, generator=g).to(dtype), torch.randn(c, d, generator=g).to(dtype)
    b = torch.randn(c, generator=g).to(dtype) if has_b else None
    cw = torch.rand(c, generator=g) + 0.5 if has_cw else None
    if kind == "prob":
        t = torch.randn(n, c, generator=g).softmax(1).to(dtype)
    else:
        t = torch.randint(0, c, (n,), generator=g)
        t[2] = -100
        if kind == "ignored":
            t[:] = -100
    coef = reference.coefficients(t, cw, "sum", -100, ls, c, torch.float32)
    flags = (policy, torch.float32, True, True, has_b)
    want = reference.chunked(x, w, coef, b, 4, *flags)
    for tile in ((4, 32), (11, 90), (3, 7)):
        got = tiled.tiled(x, w, coef, b, tile, *flags)
        tol = 1e-5 if dtype == torch.float32 else 3e-2
        for a, e in zip(got, want):
            assert a.shape == e.shape and a.dtype == e.dtype
            scale = max(float(e.float().abs().max()) if e.numel() else 0.0, 1.0)
            assert a.numel() == 0 or float((a.float() - e.float()).abs().max()) <= tol * scale, (tile, a, e)


def test_tile_shape_fits_the_row_chunked_loops_memory():
    """Every tile :func:`tile_shape` gives keeps the logits tile plus the fp32 grad_input accumulator within the
    row-chunked loop's buffer at the same ``batch_chunk_size``; too little memory gives ``None`` (row chunks)."""
    from accel.kernels.ops.linear_cross_entropy import tiled

    for n, d, c, rows in ((8192, 2048, 32000, 512), (8192, 4096, 128256, 256), (8192, 1024, 151936, 1024),
                          (100, 64, 500, 100), (8192, 2048, 32000, 64)):
        shape = tiled.tile_shape(n, d, c, rows, 2, 4)
        if shape is None:
            assert rows * c * 2 < min(n, tiled.MIN_TILE_ROWS) * (d * 4 + min(c, tiled.MIN_TILE_COLS) * 2)
            continue
        r, v = shape
        assert r * v * 2 + r * d * 4 <= min(n, rows) * c * 2 and r >= min(n, tiled.MIN_TILE_ROWS)
        assert v == c or v % 128 == 0
