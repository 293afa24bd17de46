"""Fixtures of the transformers integration's tests."""

from __future__ import annotations

import pytest


#: The accel ops a patched model calls, and their eager references (registered at the CPU key as the "kernels"
#: of :func:`cpu_kernels`, so that the registry takes the calls as it takes a GPU kernel's).
def _references() -> dict:
    from accel.kernels.ops.add_rms_norm_hf import reference as arn
    from accel.kernels.ops.geglu import reference as gg
    from accel.kernels.ops.linear_cross_entropy import reference as lce
    from accel.kernels.ops.moe import op as _moe_ops  # noqa: F401 - defines accel::grouped_mm
    from accel.kernels.ops.moe import reference as moe
    from accel.kernels.ops.rms_norm_hf import reference as rn
    from accel.kernels.ops.rope import reference as rp
    from accel.kernels.ops.swiglu import reference as sw

    return {"accel::swiglu": sw.swiglu, "accel::geglu": gg.geglu, "accel::rope": rp.rope, "accel::rms_norm_hf": rn.rms_norm_hf,
            "accel::add_rms_norm_hf": arn.add_rms_norm_hf, "accel::linear_cross_entropy": lce.forward,
            "accel::grouped_mm": moe.grouped_mm}


@pytest.fixture
def cpu_kernels():
    """Each accel op's reference registered at the CPU key: accel's registry takes the calls (as a GPU kernel's),
    so a patched model runs accel's ops on CPU. Yields ``{op: registration name}``; unregisters after."""
    import accel.kernels as ak
    import accel.nn  # noqa: F401 - defines accel::linear_cross_entropy

    names = {}
    try:
        for op, fn in _references().items():
            names[op] = ak.register(op, impl=fn, backends=["cpu"], dsl="triton", name=f"test_{op[7:]}.cpu")
        yield names
    finally:
        for n in names.values():
            ak.unregister(n)




#: The ops :func:`declining` registers.
DECLINING_OPS = ("accel::rms_norm_hf", "accel::add_rms_norm_hf", "accel::rope", "accel::swiglu")


@pytest.fixture
def declining():
    """Each op of :data:`DECLINING_OPS`'s reference registered at the CPU key behind a cacheable cond that takes
    only calls of more than 10**6 elements (none in these tests): the registry declines every call, as a GPU
    kernel declines decode's tensors. Yields ``({op: [the shapes its cond saw]}, [registration names])``."""
    import accel.kernels as ak

    calls: dict = {op: [] for op in DECLINING_OPS}
    names = []

    def cond_for(op):
        def cond(*args, **kwargs):
            calls[op].append(tuple(args[0].shape))
            return args[0].numel() > 10**6
        cond.cacheable = True
        return cond

    try:
        for op, fn in _references().items():
            if op in DECLINING_OPS:
                names.append(ak.register(op, impl=fn, backends=["cpu"], dsl="triton", cond=cond_for(op),
                                         name=f"declining_{op[7:]}.cpu"))
        yield calls, names
    finally:
        for n in names:
            ak.unregister(n)
