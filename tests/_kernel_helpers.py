"""Shared pieces of the kernel-registry tests: both registry paths, a clean registry, a counting impl, a
tuning table for routing tests on faked CUDA tensors, the CuTeDSL compile helpers, a script run in Triton's
interpreter (which may import this module), RoPE's rounding bound, and a dispatch mode logging the ops it sees."""

import contextlib
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import accel.kernels as ak
from accel import _compat
from accel.kernels import core as kcore
from accel.kernels.ops.rope import reference as rope_reference
from accel.kernels.tuning import tolerance

#: The registration paths this torch offers: accel's own router always, torch._native where present.
PATHS = ["accel"] + (["native"] if _compat.native_dsl_registry() is not None else [])


@pytest.fixture(autouse=True)
def _clean_registry():
    """No override or filter survives a test; the registration path is restored."""
    yield
    for o in reversed(ak.overrides()):  # the last registered first: a forward goes before the backward it needs
        ak.unregister(o.name)
    ak.enable()
    ak.set_verify(False)
    kcore.state.STATE.path_mode = None
    kcore.state.STATE.said.clear()


def register_forward_only(*args, **kwargs):
    """``ak.register`` of a forward-only ``_fused_rms_norm`` override at the CPU key, for tests about the
    router rather than training: asserts the warning accel gives there (autograd's backward would then meet
    no CPU kernel) so it is checked, not left in the run's summary. Returns the registration name."""
    from accel.errors import KernelRegistrationWarning

    with pytest.warns(KernelRegistrationWarning, match="where ATen has only a composite of it"):
        return ak.register(*args, **kwargs)


@pytest.fixture(params=PATHS)
def path(request):
    """Run the test once per registration path."""
    ak.use_registry(request.param)
    return request.param


class Counting:
    """An impl that counts calls and answers with a given function."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


@contextlib.contextmanager
def routing_table(monkeypatch, entries: list, archs=("sm_90",)):
    """While the block runs: ``accel.kernels.tuning.table.table`` holds ``entries`` (folded as user entries) for
    ``archs`` and nothing for other archs, the table archs are ``{"sm_90"}``, and tensors are fake (a
    ``FakeTensorMode``: ``device="cuda"`` tensors on a CPU machine). The tuning floors and the arch cache are
    forgotten before and after."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from accel.kernels.ops import conds as _conds
    from accel.kernels.tuning import table as _tuning

    folded: dict = {}
    _tuning._fold(folded, entries, "user")
    monkeypatch.setattr(_tuning, "table", lambda arch: folded if arch in archs else {})
    monkeypatch.setattr(_tuning, "_table_archs", lambda: {"sm_90"})
    _tuning.forget_floors()
    try:
        with FakeTensorMode(), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # FakeTensor.data_ptr() deprecation
            yield
    finally:
        _conds.arch.cache_clear()
        _tuning.forget_floors()


@contextlib.contextmanager
def gpu_user_table(monkeypatch, tmp_path, entries: list):
    """While the block runs: ``entries`` written as the user tuning table of the current CUDA device's arch (in
    ``tmp_path``, through ``ACCEL_TUNING_DIR``) and loaded, and kernel outputs NaN-poisoned
    (:data:`accel.kernels.dsl.launch.poison_outputs`); both undone after."""
    import torch

    from accel.kernels.ops import conds as _conds
    from accel.kernels.dsl import launch as _launch, triton_utils as _triton_utils
    from accel.kernels.tuning import table as _tuning

    monkeypatch.setenv(_tuning.TUNING_DIR_ENV, str(tmp_path))
    _tuning.write_user_table(_conds.arch(torch.device("cuda")), entries)
    _tuning.reload()
    try:
        _launch.poison_outputs = True
        yield
    finally:
        _launch.poison_outputs = False
        _tuning.reload()


#: Builds a CuTeDSL kernel in a subprocess (the CUTE_DSL_* variables must be set before cutlass is imported):
#: ``build(*args)``, then ``build(*refused)``, which must raise ValueError.
_CUTE_BUILD = """
import json, sys
import importlib
k = importlib.import_module(sys.argv[1])
args, refused = ([tuple(a) if isinstance(a, list) else a for a in json.loads(v)] for v in sys.argv[2:4])
k.build(*args)
try:
    k.build(*refused)
except ValueError as exc:
    print("REFUSED", exc)
"""


def sm90a_ptx(tmp_path, module: str, args: list, refused: list) -> tuple[str, str]:
    """``(PTX, stdout)`` of CuTeDSL kernel module ``module``'s ``build(*args)`` compiled for ``sm_90a`` on this
    machine (no GPU needed), after ``build(*refused)`` was tried too (stdout says ``REFUSED <message>``)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", _CUTE_BUILD, module, json.dumps(args), json.dumps(refused)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return "\n".join(p.read_text() for p in Path(tmp_path).glob("*.ptx")), r.stdout


def ptxas_spills(tmp_path, ptx: str) -> tuple[int, int]:
    """``(spill store bytes, spill load bytes)`` of ``ptx`` assembled for ``sm_90a`` by the ``ptxas`` that the
    triton wheel ships (spills happen in ptxas, after the PTX: the PTX alone cannot show them), summed over
    the kernels in it."""
    import os
    import re
    import subprocess

    import triton

    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    src = tmp_path / "kernel_for_ptxas.ptx"
    src.write_text(ptx)
    r = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(src), "-o", os.devnull], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    found = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", r.stderr)
    assert found, r.stderr[-2000:]
    return sum(int(a) for a, _ in found), sum(int(b) for _, b in found)


@pytest.fixture
def meta_floors(monkeypatch):
    """The ``meta`` arch (the cond tests' meta tensors) declares a floor of 2**20 elements for every op, dtype
    and DSL, as the shipped ``sm_90`` table does: a miss of at least that many elements routes there, a
    smaller one declines. Every other arch keeps its real declared defaults."""
    from accel.kernels.tuning import table as _tuning

    real, real_archs = _tuning.defaults, _tuning._table_archs
    floors = {(op, dtype, dsl): _tuning.Default(1 << 20, "user", "declared for the meta tests")
              for op in _tuning.OPS for dtype in _tuning.DTYPE_NAMES for dsl in _tuning.IMPLS[1:]}
    monkeypatch.setattr(_tuning, "defaults", lambda arch: floors if arch == "meta" else real(arch))
    monkeypatch.setattr(_tuning, "_table_archs", lambda: real_archs() | {"meta"})
    _tuning.forget_floors()
    yield floors
    _tuning.forget_floors()


def saved_storages(fn, *args, exclude=()):
    """``(fn(*args), {storage data_ptr: nbytes})``: the storages of every tensor autograd saves for backward
    while ``fn`` runs, less those of the tensors in ``exclude`` (the leaves, to count intermediates only)."""
    import torch

    saved = []

    def pack(t):
        saved.append(t.untyped_storage())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    left_out = {t.untyped_storage().data_ptr() for t in exclude if t is not None}
    return out, {s.data_ptr(): s.nbytes() for s in saved if s.data_ptr() not in left_out}


def interpreted_report(script: str, *argv: str, timeout: int = 600) -> dict:
    """Run ``script`` (``python -c``, with ``argv``) in a fresh process with ``TRITON_INTERPRET=1`` (and no
    ``HELION_INTERPRET``; ``tests/`` on its ``PYTHONPATH``) and return the JSON of its ``REPORT...`` stdout line;
    fails the test, with the process's output tails, where it exits non-zero."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "HELION_INTERPRET")}
    env["TRITON_INTERPRET"] = "1"
    # the script imports these helpers as the tests do
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (os.path.dirname(__file__), env.get("PYTHONPATH"))))
    proc = subprocess.run([sys.executable, "-c", script, *argv], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT"))
    return json.loads(line.removeprefix("REPORT"))


class OpLog(TorchDispatchMode):
    """A dispatch mode that records the name of every op the dispatcher runs under it (``ops``), unchanged."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


#: The unit roundoff of each dtype: half its epsilon, the largest relative error of one rounding.
UNIT_ROUNDOFF = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def rope_compare(out, ref, q, k, cos, sin, unsqueeze_dim: int, backward: bool) -> tuple[float, str | None]:
    """``(max_abs_error, problem)`` of RoPE's kernel outputs ``out`` (q's, k's) against the reference's ``ref``,
    as :func:`accel.kernels.tuning.tolerance.compare` gives them, with a wider bound where the products cancel.

    Hugging Face's arithmetic (the reference) rounds its two products (``x * cos`` and ``rotate_half(x) * sin``;
    backward ``g * cos`` and ``rotate_half_t(g * sin)``) to the input dtype one by one, the kernel rounds once in
    fp32: where the products cancel, the results differ by up to those roundings of the products' absolute sum,
    which an elementwise tolerance on the small result ignores. The bound is the dtype's tolerance plus two unit
    roundoffs of that sum; a NaN (a poisoned, unwritten output) fails it.
    """
    c, s = cos.float().unsqueeze(unsqueeze_dim), sin.float().unsqueeze(unsqueeze_dim)
    rtol, atol = tolerance.tolerance(q.dtype)
    worst = 0.0
    for i, (o, r, x) in enumerate(zip(out, ref, (q, k))):
        if o.shape != r.shape or o.dtype != r.dtype:
            return float("inf"), (f"output {i}: {list(o.shape)} {o.dtype} where the reference gives "
                                   f"{list(r.shape)} {r.dtype}")
        x = x.float()
        terms = ((x * c).abs() + rope_reference.rotate_half_t(x * s).abs() if backward
                 else (x * c).abs() + (rope_reference.rotate_half(x) * s).abs())
        err = (o.float() - r.float()).abs()
        worst = max(worst, float(err.max()))
        bad = ~(err <= atol + rtol * r.float().abs() + 2 * UNIT_ROUNDOFF[q.dtype] * terms)
        if bad.any():
            return worst, f"output {i} {list(o.shape)} {o.dtype}: {int(bad.sum())} elements beyond the bound " \
                          f"(max abs error {err.max():.3g})"
    return worst, None
