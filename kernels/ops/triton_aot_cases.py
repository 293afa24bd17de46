"""The built-in Triton kernels as AOT compile cases (:class:`accel.kernels.dsl.triton_aot.Case`).

Every ``@triton.jit`` kernel of ``kernels/ops/*/triton_kernel.py``, forward and backward, specialized as the
op's impl would launch it: the configs the shipped tuning tables name (``kernels/tuning/<arch>.json``,
``impl: "triton"``; an entry without a config runs the default for its row length), one default config
per row-length class (:data:`ROW_CLASSES`), and with ``full=True`` the configs ``accel bench --tune``
may time (each op's ``candidate_configs``, at the row lengths of :data:`_SWEPT`) and fp32 as well as bf16. Every flag that adds work is on
(weight, bias, every gradient): the heaviest variant of each kernel. Pointers and row lengths / strides
are marked 16-divisible, as Triton's launcher marks them for 16-byte aligned rows of a multiple of 16
elements.

Importing this module imports no Triton; :func:`cases` imports the kernel modules (and so Triton).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from importlib import import_module, resources
from typing import Any

from accel.kernels.dsl.triton_aot import Case
from accel.kernels.dsl.triton_configs import next_power_of_2

__all__ = ["KERNEL_OPS", "ROW_CLASSES", "cases", "table_configs"]

#: Row lengths (elements) standing for each row-length class of the defaults
#: (:func:`accel.kernels.dsl.triton_configs.row_config`): 16 rows of 128 per program; 4 rows of 1024 (8 warps);
#: one row of 4096 (8 warps); 8192 and 16384 (16 warps), the longest rows held in registers by the norms;
#: 32768, softmax's longest; 65536, the looped kernels'.
ROW_CLASSES: dict[str, tuple[int, ...]] = {
    "rms_norm": (128, 1024, 4096, 16384, 65536),
    "softmax": (128, 1024, 4096, 16384, 32768, 65536),
    "layer_norm": (128, 1024, 4096, 16384),
    "rms_norm_hf": (128, 1024, 4096, 16384),
    "add_rms_norm_hf": (128, 1024, 4096, 16384),
    "swiglu": (1024, 5632, 14336),  # Llama-7B/70B, Mistral intermediate sizes
    "geglu": (6912, 9216, 14336),  # Gemma-3-1B, Gemma-2-2B, Gemma-2-9B intermediate sizes
    "rope": ((32, 8, 64), (32, 8, 32), (64, 8, 64), (16, 16, 128)),  # (q heads, kv heads, half head dim)
    "linear_cross_entropy": (32000, 128256),  # Llama 2 / Llama 3 vocabularies
}
#: The op families, in report order, with the tuning-table ops each one's kernels serve.
KERNEL_OPS: dict[str, tuple[str, ...]] = {
    "rms_norm": ("rms_norm_fwd", "rms_norm_bwd"),
    "layer_norm": ("layer_norm_fwd", "layer_norm_bwd"),
    "softmax": ("softmax_fwd", "softmax_bwd"),
    "rms_norm_hf": ("rms_norm_hf_fwd", "rms_norm_hf_bwd"),
    "add_rms_norm_hf": ("add_rms_norm_hf_fwd", "add_rms_norm_hf_bwd"),
    "swiglu": ("swiglu_fwd", "swiglu_bwd"),
    "geglu": ("geglu_fwd", "geglu_bwd"),
    "rope": ("rope_fwd", "rope_bwd"),
    "linear_cross_entropy": ("linear_cross_entropy_fwd", "linear_cross_entropy_bwd"),
}
_ESIZE = {"bf16": 2, "fp16": 2, "fp32": 4}
#: Row lengths whose every tuner candidate the full matrix compiles (the others: their default only), so that
#: it runs within an hour on two shared cores: a shorter row's candidates are fewer-elements-per-thread
#: variants of the swept ones; softmax is swept at 32768, its longest rows in registers and where its looped
#: candidates (32 warps, software pipelining) are; SwiGLU's tiles (elementwise) only as its defaults.
_SWEPT = {"rms_norm": (4096, 16384), "softmax": (32768,), "layer_norm": (4096, 16384), "swiglu": ()}


#: Families whose kernels are another family's (with flags on): family -> the kernel module's family.
_KERNELS_OF = {"add_rms_norm_hf": "rms_norm_hf", "geglu": "swiglu"}


def _k(family: str) -> Any:
    return import_module(f"accel.kernels.ops.{_KERNELS_OF.get(family, family)}.triton_kernel")


def table_configs() -> list[tuple[str, str, str, int, int, dict | None]]:
    """``(arch, op, dtype, m, n, config or None)`` of every ``impl: "triton"`` entry of the shipped tables."""
    out = []
    for path in sorted(resources.files("accel.kernels.tuning").iterdir(), key=lambda p: p.name):
        if not path.name.endswith(".json"):
            continue
        data = json.loads(path.read_text())
        for e in data.get("entries", []):
            if e.get("impl") == "triton":
                out.append((data.get("arch", path.name[:-5]), e["op"], e["dtype"], e["m"], e["n"], e.get("config")))
    return out


def _sig(fn: Any, types: dict[str, str]) -> dict[str, str]:
    """Triton's signature for ``fn``: ``types`` for the runtime arguments, ``constexpr`` for the rest."""
    return {a: types.get(a, "constexpr") for a in fn.arg_names}


# ----------------------------------------------------------------------------- one builder per kernel family


def _rows_case(op: str, fn: Any, types: dict, cx: dict, aligned: tuple, cfg: dict, n: int, dt: str, source: str,
               stages: int | None = None) -> Case:
    return Case(op, fn, _sig(fn, types), cx, aligned, cfg["num_warps"], stages, cfg, source,
                cx.get("ROWS", 1) * cx["BLOCK_N"], cx["BLOCK_N"], _ESIZE[dt])


def _rms_norm(op: str, cfg: dict, n: int, dt: str, source: str) -> Case:
    k = _k("rms_norm")
    p, f = f"*{dt}", "*fp32"
    if op == "rms_norm_bwd":
        types = dict(DY=p, X=p, W=p, RSTD=f, DX=p, DW_PARTIAL=f, M="i32", N="i32", rows_per_program="i32")
        cx = dict(BLOCK_N=max(cfg["block_n"], next_power_of_2(n)), HAS_W=True, WANT_DX=True, WANT_DW=True)
        return _rows_case(op, k.rms_norm_bwd_rows, types, cx, ("DY", "X", "W", "RSTD", "DX", "DW_PARTIAL", "N"),
                          cfg, n, dt, source)
    if cfg.get("looped"):
        types = dict(X=p, W=p, Y=p, RSTD=f, N="i32", eps="fp32")
        cx = dict(BLOCK_N=cfg["block_n"], HAS_W=True)
        return _rows_case(op, k.rms_norm_fwd_looped, types, cx, ("X", "W", "Y", "RSTD", "N"), cfg, n, dt, source)
    types = dict(X=p, W=p, Y=p, RSTD=f, M="i32", N="i32", eps="fp32")
    cx = dict(BLOCK_N=max(cfg["block_n"], next_power_of_2(n)), ROWS=cfg["rows"], HAS_W=True,
              HINTS=bool(cfg.get("hints", False)), WIDE=False)
    return _rows_case(op, k.rms_norm_fwd_rows, types, cx, ("X", "W", "Y", "RSTD", "N"), cfg, n, dt, source)


def _softmax(op: str, cfg: dict, n: int, dt: str, source: str) -> Case:
    k = _k("softmax")
    p = f"*{dt}"
    bwd = op == "softmax_bwd"
    ptrs = dict(DY=p, Y=p, DX=p) if bwd else dict(X=p, Y=p)
    if cfg.get("looped"):
        fn = k.softmax_bwd_looped if bwd else k.softmax_fwd_looped
        cx = dict(BLOCK_N=cfg["block_n"], HINTS=bool(cfg.get("hints", False)))
        return _rows_case(op, fn, {**ptrs, "N": "i32"}, cx, (*ptrs, "N"), cfg, n, dt, source,
                          cfg.get("num_stages"))
    fn = k.softmax_bwd_rows if bwd else k.softmax_fwd_rows
    cx = dict(BLOCK_N=max(cfg["block_n"], next_power_of_2(n)), ROWS=cfg["rows"], HINTS=bool(cfg.get("hints", False)),
              WIDE=False)
    return _rows_case(op, fn, {**ptrs, "M": "i32", "N": "i32"}, cx, (*ptrs, "N"), cfg, n, dt, source)


def _layer_norm(op: str, cfg: dict, n: int, dt: str, source: str) -> Case:
    k = _k("layer_norm")
    p, f = f"*{dt}", "*fp32"
    if op == "layer_norm_fwd":
        types = dict(X=p, W=p, B=p, Y=p, MEAN=f, RSTD=f, M="i32", N="i32", eps="fp32")
        cx = dict(BLOCK_N=max(cfg["block_n"], next_power_of_2(n)), ROWS=cfg["rows"], HAS_W=True, HAS_B=True,
                  HINTS=bool(cfg.get("hints", False)), WIDE=False)
        return _rows_case(op, k.layer_norm_fwd_rows, types, cx, ("X", "W", "B", "Y", "MEAN", "RSTD", "N"), cfg, n,
                          dt, source)
    types = dict(DY=p, X=p, W=p, MEAN=f, RSTD=f, DX=p, DW_PARTIAL=f, DB_PARTIAL=f, M="i32", N="i32")
    flags = dict(HAS_W=True, WANT_DX=True, WANT_DW=True, WANT_DB=True)
    aligned = ("DY", "X", "W", "MEAN", "RSTD", "DX", "DW_PARTIAL", "DB_PARTIAL", "N")
    if cfg.get("split"):
        # STAGE 0: the one-launch exchange a GPU runs (1 and 2 are the interpreter's two launches)
        part = max(cfg["block_n"], next_power_of_2(-(-n // cfg["split"])))
        cx = dict(PART=part, SPLIT=cfg["split"], STAGE=0, **flags)
        fn = k.layer_norm_bwd_split
        return Case(op, fn, _sig(fn, {**types, "SLOTS": "*i64", "rows_per_group": "i32"}), cx, (*aligned, "SLOTS"),
                    cfg["num_warps"], None, cfg, source, part, part, _ESIZE[dt])
    cx = dict(BLOCK_N=max(cfg["block_n"], next_power_of_2(n)), **flags)
    return _rows_case(op, k.layer_norm_bwd_rows, {**types, "rows_per_program": "i32"}, cx, aligned, cfg, n, dt,
                      source)


def _layer_norm_finish(dt: str) -> Case:
    """The dw/db partial sums' kernel (one config: :data:`FINISH_BLOCK_N` x :data:`FINISH_BLOCK_G`, 4 warps)."""
    k = _k("layer_norm")
    fn = k.partials_finish
    types = dict(P="*fp32", OUT0=f"*{dt}", OUT1=f"*{dt}", G="i32", N="i32", STRIDE="i32")
    cx = dict(BLOCK_N=k.FINISH_BLOCK_N, BLOCK_G=k.FINISH_BLOCK_G)
    cfg = {"block_n": k.FINISH_BLOCK_N, "block_g": k.FINISH_BLOCK_G, "num_warps": 4}
    return Case("layer_norm_bwd", fn, _sig(fn, types), cx, ("P", "OUT0", "OUT1", "N", "STRIDE"), 4, None, cfg,
                "fixed", k.FINISH_BLOCK_N * k.FINISH_BLOCK_G, k.FINISH_BLOCK_N, 4)


def _rms_norm_hf(op: str, cfg: dict, n: int, dt: str, source: str) -> Case:
    """rms_norm_hf's kernels; for ``add_rms_norm_hf_*`` ops the same kernels with the residual add
    (``RESIDUAL``, ``ADD_GRAD``) on. The plain ops pass dummy pointers for ``R``, ``S``, ``DS`` (typed and
    aligned as the real ones: the same signature)."""
    k = _k("rms_norm_hf")
    p, f = f"*{dt}", "*fp32"
    add = op.startswith("add_")
    if op.endswith("_bwd"):
        types = dict(DY=p, X=p, W=p, RSTD=f, DX=p, DW_PARTIAL=f, DS=p, M="i32", N="i32", rows_per_program="i32")
        cx = dict(BLOCK_N=max(cfg["block_n"], next_power_of_2(n)), UNIT_OFFSET=False, WANT_DX=True, WANT_DW=True,
                  ADD_GRAD=add)
        return _rows_case(op, k.rms_norm_hf_bwd, types, cx, ("DY", "X", "W", "RSTD", "DX", "DW_PARTIAL", "DS", "N"),
                          cfg, n, dt, source)
    types = dict(X=p, W=p, Y=p, RSTD=f, R=p, S=p, M="i32", N="i32", eps="fp32")
    cx = dict(BLOCK_N=max(cfg["block_n"], next_power_of_2(n)), ROWS=cfg["rows"], HINTS=bool(cfg.get("hints", False)),
              WIDE=False, UNIT_OFFSET=False, RESIDUAL=add)
    return _rows_case(op, k.rms_norm_hf_fwd, types, cx, ("X", "W", "Y", "RSTD", "R", "S", "N"), cfg, n, dt, source)


def _swiglu(op: str, cfg: dict, n: int, dt: str, source: str, product: bool = False) -> Case:
    """``product``: the backward's variant that also writes the product (``swiglu_bwd_product``, the same
    arguments and config as ``swiglu_bwd``). GeGLU's ops (``geglu_*``): the same kernels with ``ACT`` GELU-tanh."""
    k = _k("swiglu")
    p = f"*{dt}"
    if op.endswith("_bwd"):
        fn = k.swiglu_bwd_product if product else k.swiglu_bwd
        ptrs, strides = ("DY", "A", "B", "DA", "DB"), ("sdy", "sa", "sb", "sda", "sdb")
    else:
        fn, ptrs, strides = k.swiglu_fwd, ("A", "B", "Y"), ("sa", "sb", "sy")
    types = {**{a: p for a in ptrs}, "M": "i32", "N": "i32", **{s: "i32" for s in strides}}
    cx = dict(BLOCK_N=cfg["block_n"], ROWS=cfg["rows"], WIDE=False,
              ACT=k.GELU_TANH if op.startswith("geglu") else k.SILU)
    return _rows_case(op, fn, types, cx, (*ptrs, "N", *strides), cfg, n, dt, source)


def _rope(op: str, cfg: dict, shape: tuple, dt: str, source: str) -> Case:
    k = _k("rope")
    fn = k.rope_rows
    p = f"*{dt}"
    ints = ("S", "HQ", "HK", "HALF", "q_sb", "q_sh", "q_ss", "k_sb", "k_sh", "k_ss", "qo_sb", "qo_sh", "qo_ss",
            "ko_sb", "ko_sh", "ko_ss", "c_sb", "c_ss", "s_sb", "s_ss")
    ptrs = ("Q", "K", "COS", "SIN", "QO", "KO")
    types = {**{a: p for a in ptrs}, **{a: "i32" for a in ints}}
    cx = dict(BLOCK_D=cfg["block_d"], BLOCK_HQ=cfg["block_hq"], BLOCK_HK=cfg["block_hk"], BACKWARD=op == "rope_bwd")
    # every stride is a multiple of the (16-divisible) head dim; "S" (sequence length) is not assumed
    return Case(op, fn, _sig(fn, types), cx, (*ptrs, *ints[1:]), cfg["num_warps"], None, cfg, source,
                cfg["block_d"] * min(cfg["block_hq"], cfg["block_hk"]), cfg["block_d"], _ESIZE[dt])


def _lce(op: str, cfg: dict, v: int, dt: str, source: str, prob: bool) -> Case:
    k = _k("linear_cross_entropy")
    fn = k.lce_rows
    p, f = f"*{dt}", "*fp32"
    types = dict(Z=p, G=p, T=p if prob else "*i64", A=f, B=f, BW=f, CW=f, ZC=f, LOSS=f, V="i32", stride_z="i32",
                 stride_g="i32", stride_t="i32", smoothing="fp32", inv_v="fp32", cap="fp32")
    # every option on, the softcap and the z-loss included (their code paths compile for every target)
    cx = dict(BLOCK_V=cfg["block_v"], PROB=prob, SMOOTH=True, HAS_CW=True, WRITE_GRAD=True, SOFTCAP=True, HAS_Z=True)
    aligned = ("Z", "G", "T", "CW", "V", "stride_z", "stride_g", "stride_t") if prob else ("Z", "G", "CW", "V",
                                                                                         "stride_z", "stride_g")
    return Case(op, fn, _sig(fn, types), cx, aligned, cfg["num_warps"], None, cfg, source, cfg["block_v"],
                cfg["block_v"], _ESIZE[dt])


def _lce_tiles(op: str, cfg: dict, v: int, dt: str, source: str, prob: bool) -> Iterator[Case]:
    """The tiled schedule's two kernels (``lce_tile_stats``, ``lce_tile_grad``) at the row kernel's config; a
    tile's width and first column are multiples of 128 (:func:`.linear_cross_entropy.tiled.tile_shape`)."""
    k = _k("linear_cross_entropy")
    p, f = f"*{dt}", "*fp32"
    common = dict(Z=p, T=p if prob else "*i64", A=f, B=f, CW=f, ZC=f, V="i32", col0="i32", stride_z="i32",
                  stride_t="i32", smoothing="fp32", inv_v="fp32", cap="fp32")
    cx = dict(BLOCK_V=cfg["block_v"], PROB=prob, SMOOTH=True, HAS_CW=True, SOFTCAP=True, HAS_Z=True)
    target = ("T", "stride_t") if prob else ()
    for fn, types, aligned in (
            (k.lce_tile_stats, dict(common, ST=f, n_st="i32"), ("Z", "CW", "ST", "n_st", "V", "col0", "stride_z")),
            (k.lce_tile_grad, dict(common, G=p, LSE=f, PC=f, stride_g="i32"),
             ("Z", "G", "CW", "V", "col0", "stride_z", "stride_g"))):
        yield Case(op, fn, _sig(fn, types), cx, (*aligned, *target), cfg["num_warps"], None, cfg, source,
                   cfg["block_v"], cfg["block_v"], _ESIZE[dt])


def _lce_aux(op: str, dt: str, source: str) -> Iterator[Case]:
    """The two launches around the chunk loop: the row coefficients (``lce_coefs``, every option on) and the
    backward's in-place scale of a precomputed gradient (``lce_scale``, ``dt`` gradients)."""
    k = _k("linear_cross_entropy")
    f = "*fp32"
    types = dict(T="*i64", CW=f, CWS=f, GO=f, T_HAT="*i64", A=f, B=f, BW=f, EMPTY="*i1", N="i32", C="i32",
                 ignore_index="i32", keep="fp32", smooth_c="fp32", c_f="fp32")
    cx = dict(BLOCK=k.COEF_BLOCK, HAS_CW=True, MEAN=True, SMOOTH=True, HAS_GO=True)
    yield Case(op, k.lce_coefs, _sig(k.lce_coefs, types), cx, ("T", "GO", "T_HAT", "A", "B", "BW", "N"), 4, None,
               {"block": k.COEF_BLOCK, "num_warps": 4}, source, k.COEF_BLOCK, k.COEF_BLOCK, 8)
    types = dict(X=f"*{dt}", S=f, numel="i64")
    yield Case(op, k.lce_scale, _sig(k.lce_scale, types), dict(BLOCK=k.SCALE_BLOCK), ("X", "numel"), 8, None,
               {"block": k.SCALE_BLOCK, "num_warps": 8}, source, k.SCALE_BLOCK, k.SCALE_BLOCK, _ESIZE[dt])


# ----------------------------------------------------------------------------- configs per family


def _defaults(family: str, op: str, n: Any) -> dict:
    """The op's default launch config for row length (or rope shape) ``n``."""
    k = _k(family)
    if family in ("rms_norm", "rms_norm_hf", "add_rms_norm_hf") and op.endswith("_bwd"):
        block_n, warps = k.bwd_config(n)
        return {"block_n": block_n, "num_warps": warps}
    if family == "layer_norm" and op.endswith("_bwd"):
        return k.bwd_config(n)
    if family == "rope":
        return k.default_config(*n)
    return k.default_config(n)


def _candidates(family: str, op: str, n: Any) -> list[dict]:
    """Every config ``accel bench --tune`` may time for ``op`` at ``n`` (the default alone where the op has no
    candidate list)."""
    k = _k(family)
    if family == "layer_norm":
        return k.candidate_configs(n, "bwd" if op.endswith("_bwd") else "fwd")
    if family in ("rms_norm", "softmax", "swiglu") and not (family == "rms_norm" and op.endswith("_bwd")):
        return k.candidate_configs(n)
    return [_defaults(family, op, n)]


def _fits(family: str, op: str, cfg: dict, n: Any) -> bool:
    """Whether the impl would run ``cfg`` at ``n`` (the impls' limits: rows in registers up to MAX_BLOCK_N)."""
    if family == "layer_norm" and not cfg.get("split"):
        return n <= _k(family).MAX_BLOCK_N
    if family in ("rms_norm", "rms_norm_hf", "add_rms_norm_hf") and op.endswith("_bwd"):
        return n <= _k(family).MAX_BLOCK_N
    if family in ("rms_norm_hf", "add_rms_norm_hf"):
        return n <= _k(family).MAX_BLOCK_N
    return True


#: The case builder of each family, ``(op, cfg, n, dt, source) -> Case``.
_BUILDERS = {"rms_norm": _rms_norm, "softmax": _softmax, "layer_norm": _layer_norm, "rms_norm_hf": _rms_norm_hf,
             "add_rms_norm_hf": _rms_norm_hf, "swiglu": _swiglu, "geglu": _swiglu, "rope": _rope}


def _build(family: str, op: str, cfg: dict, n: Any, dt: str, source: str) -> Iterator[Case]:
    """The cases of one config: one per kernel it launches (linear cross-entropy: the row kernel and the
    tiled schedule's two, each for class-index and probability targets, and the coefficient and scale
    launches; SwiGLU's backward: both its kernels); none for a family without a builder."""
    if family == "linear_cross_entropy":
        for prob in (False, True):
            yield _lce(op, cfg, n, dt, source, prob=prob)
            yield from _lce_tiles(op, cfg, n, dt, source, prob=prob)
        yield from _lce_aux(op, dt, source)
    elif family in _BUILDERS:
        yield _BUILDERS[family](op, cfg, n, dt, source)
        if op == "swiglu_bwd":
            yield _swiglu(op, cfg, n, dt, source, product=True)


_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def cases(families: Sequence[str] | None = None, *, full: bool = False) -> list[Case]:
    """The AOT cases of the built-in Triton kernels of ``families`` (default all, :data:`KERNEL_OPS`).

    ``full=False`` (CI): bf16; the shipped tables' Triton configs; the default config of each
    :data:`ROW_CLASSES` row length and of each table entry's row length; LayerNorm's partials kernel.
    ``full=True``: also every tuner candidate at the row lengths of :data:`_SWEPT` in bf16 (an L2-hint twin
    of another candidate left out), and the tables' configs and the defaults in fp32 too.
    Duplicates (same kernel, signature, constexprs and options) are dropped, the first source kept.

    Raises:
        ValueError: an unknown family name.
    """
    families = list(KERNEL_OPS) if families is None else list(families)
    unknown = [f for f in families if f not in KERNEL_OPS]
    if unknown:
        raise ValueError(f"AOT cases: unknown kernel families {unknown}. Known: {sorted(KERNEL_OPS)}. "
                         f"Pass names from that list (--kernels).")
    out: list[Case] = []
    seen: set = set()

    def add(case: Case) -> None:
        if case.key() not in seen:
            seen.add(case.key())
            out.append(case)

    table = table_configs()
    for dt in (("bf16", "fp32") if full else ("bf16",)):
        for family in families:
            ops = KERNEL_OPS[family]
            for arch, op, dtype, m, n, cfg in table:
                if op in ops and _DTYPES.get(dtype, "bf16") in ("bf16", dt) and family != "rope":
                    src = f"table {arch} {dtype} {m}x{n}"
                    if _DTYPES.get(dtype) != dt:  # a bf16 entry's config tried on fp32 rows: a candidate there
                        src = f"candidate ({src} config in {dt})"
                    use = cfg if cfg is not None else _defaults(family, op, n)
                    if _fits(family, op, use, n):
                        for c in _build(family, op, use, n, dt, src + ("" if cfg else " (default)")):
                            add(c)
            for op in ops:
                for n in ROW_CLASSES[family]:
                    # candidates in bf16 only, and without their L2-hint twins (same registers and loads,
                    # other cache policy bits): the full matrix stays under an hour on two cores
                    sweep = full and dt == "bf16" and n in _SWEPT.get(family, ROW_CLASSES[family])
                    configs = _candidates(family, op, n) if sweep else [_defaults(family, op, n)]
                    for i, cfg in enumerate(configs):
                        if i and cfg.get("hints") and {**cfg, "hints": False} in configs + [
                                {k: v for k, v in cfg.items() if k != "hints"}]:
                            continue
                        if _fits(family, op, cfg, n):
                            src = f"{'default' if i == 0 else 'candidate'} n={n}"
                            for c in _build(family, op, cfg, n, dt, src):
                                add(c)
            if family == "layer_norm":
                add(_layer_norm_finish(dt))
    return out
