"""Experiment: RMSNorm forward kernel variants beside accel's rows kernel and Liger-Kernel, timed as ``accel bench`` times.

Why: on 32768x4096 bf16 the routed rows kernel stayed 0.99x Liger in every ``accel bench`` run of session 8
while its generated memory instructions matched Liger's (session 8 runs B, E, F: ``rms_variants-*.txt``).
``accel bench`` times one call at a time after an L2 flush, so a kernel's ramp-up and its last wave count:
32768 rows in programs of 4 rows on 132 SMs is 31.03 waves of 2 resident programs, the last one nearly
empty. ``--set persistent`` (session 9 run A: every one 4-30 % slower) tries a fixed grid whose programs walk
an equal share of the row tiles with the weight loaded once:

- ``persist rR gG sS {strided,contig}``: ``G`` programs of ``R``-row tiles, tiles ``pid, pid+G, ...``
  (strided) or one contiguous range per program; the loop software-pipelined over ``S`` stages
  (``tl.range(num_stages=S)``; 1: none);
- ``... cs``: the output stored with the streaming cache modifier ``.cs``;
``--set one-row`` (default) bisects the 1 % between Liger's raw kernel and accel's rows kernel of the same
launch shape (run A): one-row kernels written from Liger's semantics (``one_row``), then accel's numerics
with one change each (int32/int64 base, rstd stored first or last, weight loaded late), and the shipped
config writing into other output buffers (placement).

- controls: Liger's autograd function (as ``accel bench`` calls it), Liger's raw kernel on preallocated outputs,
  and accel's rows kernel with the shipped and neighbouring configs.

Timing: :class:`accel.kernels.bench.timing.Timer` (CUDA events around one call, the L2 zeroed before each of
``--reps`` reps, the median), every variant once per round, ``--rounds`` rounds, medians; ``--order
shuffled`` (default) shuffles each round and times Liger's raw kernel and the shipped config twice. Each variant is
checked against ATen first. Registers and spills come from the compiled kernels; ``--sass DIR`` writes the
SASS of Liger's kernel, the rows kernel and the fastest variant of the set (first shape) there.

Usage: ``python3 ci/gpu/rms_variants.py [--shapes 32768x4096,16384x8192] [--rounds 7] [--sass DIR]``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from accel.kernels.dsl import launch as _launch, triton_utils as _triton_utils
from accel.kernels.bench.timing import Timer
from accel.kernels.ops.rms_norm import triton_impl as rt


@triton.jit
def persist(X, W, Y, RSTD, M, N, eps, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, STRIDED: tl.constexpr,
            STAGES: tl.constexpr, CS: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    r = tl.arange(0, ROWS)
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    tiles = tl.cdiv(M, ROWS)
    if STRIDED:
        start = pid
        stop = tiles
        step = programs
    else:
        per = tl.cdiv(tiles, programs)
        start = pid * per
        stop = tl.minimum(start + per, tiles)
        step = 1
    for t in tl.range(start, stop, step, num_stages=STAGES):
        rows = t * ROWS + r
        row_ok = rows < M
        offs = rows[:, None].to(tl.int64) * N + cols[None, :]
        mask = row_ok[:, None] & col_ok[None, :]
        x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
        tl.store(RSTD + rows, rstd, mask=row_ok)
        y = (x * rstd[:, None] * w[None, :]).to(Y.dtype.element_ty)
        if CS:
            tl.store(Y + offs, y, mask=mask, cache_modifier=".cs")
        else:
            tl.store(Y + offs, y, mask=mask)


@triton.jit
def one_row(X, W, Y, RSTD, N, eps, offset, BLOCK_N: tl.constexpr, I64: tl.constexpr, RSTD_FIRST: tl.constexpr,
            ROUND_XHAT: tl.constexpr, W_LATE: tl.constexpr, OFFSET: tl.constexpr, LD_CM: tl.constexpr = "",
            LD_EV: tl.constexpr = "", ST_CM: tl.constexpr = "", ST_EV: tl.constexpr = "", SPLIT: tl.constexpr = False):
    """One row per program as 1-D tensors, the row's base offset a scalar (int64 where ``I64``); the rstd
    stored before ``y`` where ``RSTD_FIRST``; ``x * rstd`` rounded to the input dtype before the weight
    multiply where ``ROUND_XHAT`` (Liger's "llama" casting; accel keeps one rounding); the weight loaded
    after the row sum where ``W_LATE``; the runtime scalar ``offset`` (0.0) added to the weight in fp32 where
    ``OFFSET`` (Liger's Gemma-style offset: the additions stay in the code); ``LD_*``/``ST_*``: the cache
    modifier and eviction policy of the row's load and store (PTX ``ld``/``st`` qualifiers; "" none);
    ``SPLIT``: ``p = x * rstd`` split as ``hi = p`` rounded to the input dtype plus ``lo = p - hi`` (exact), and
    ``y = fma(lo, w, hi * w)``: for bf16/fp16 weights ``hi * w`` is exact, so ``y`` is bit-identical to
    ``p * w``, with an epilogue as long as Liger's rounded one."""
    row = tl.program_id(0)
    if I64:
        row = row.to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < N
    xin = tl.load(X + row * N + cols, mask=ok, other=0.0, cache_modifier=LD_CM, eviction_policy=LD_EV)
    if not W_LATE:
        w = tl.load(W + cols, mask=ok, other=0.0)
    x = xin.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    if RSTD_FIRST:
        tl.store(RSTD + row, rstd)
    if W_LATE:
        w = tl.load(W + cols, mask=ok, other=0.0)
    wf = w.to(tl.float32)
    if OFFSET:
        wf = wf + offset
    if ROUND_XHAT:
        y = (x * rstd).to(xin.dtype).to(tl.float32) * wf
    elif SPLIT:
        p = x * rstd
        hi = p.to(xin.dtype).to(tl.float32)
        y = tl.fma(p - hi, wf, hi * wf)
    else:
        y = x * rstd * wf
    tl.store(Y + row * N + cols, y.to(Y.dtype.element_ty), mask=ok, cache_modifier=ST_CM, eviction_policy=ST_EV)
    if not RSTD_FIRST:
        tl.store(RSTD + row, rstd)


@triton.jit
def rows_split(X, W, Y, RSTD, M, N, eps, BLOCK_N: tl.constexpr, ROWS: tl.constexpr, SPLIT: tl.constexpr):
    """accel's rows kernel (int32 offsets, weight before the row sums) with ``one_row``'s ``SPLIT`` epilogue."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    offs = rows[:, None] * N + cols[None, :]
    xin = tl.load(X + offs, mask=mask, other=0.0)
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    x = xin.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    p = x * rstd[:, None]
    if SPLIT:
        hi = p.to(xin.dtype).to(tl.float32)
        y = tl.fma(p - hi, w[None, :], hi * w[None, :])
    else:
        y = p * w[None, :]
    tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)
    tl.store(RSTD + rows, rstd, mask=row_ok)


def regs(compiled) -> str:
    try:
        return f"{compiled.n_regs} regs, {compiled.n_spills} spills"
    except Exception:  # noqa: BLE001
        return "regs ?"


def sass(compiled) -> str | None:
    try:
        return compiled.asm["sass"]
    except Exception as exc:  # noqa: BLE001
        return f"(no SASS: {type(exc).__name__}: {exc})"


def variants(m: int, n: int, sms: int) -> list[tuple[int, int, int, bool, int, bool]]:
    """``(rows, programs, warps, strided, stages, cs)`` per persistent variant for rows of ``n``: tiles of
    4096-16384 elements, 8 warps; 2, ~4 and ~8 programs per SM (strided, contiguous, strided and pipelined),
    256 (a power of two: equal shares of a power-of-two row count), and one streaming-store variant."""
    bn = triton.next_power_of_2(n)
    out = []
    rows_choices = [r for r in (1, 2, 4) if 4096 <= r * bn <= 16384] or [max(1, 4096 // bn)]
    for rows in rows_choices:
        tiles = -(-m // rows)
        for programs in (2 * sms, 512, 1024):
            if programs <= tiles:
                out += [(rows, programs, 8, True, 1, False), (rows, programs, 8, False, 1, False),
                        (rows, programs, 8, True, 2, False)]
        out += [(rows, min(tiles, 256), 8, True, 1, False), (rows, min(tiles, 512), 8, True, 1, True)]
    if bn <= 4096:
        out.append((1, min(m, 1024), 4, True, 1, False))
    return out


def one_row_variants(n: int) -> dict[str, tuple[int, dict]]:
    """name -> ``(warps, one_row flags)``: Liger's semantics first, then accel's numerics with one change each."""
    bn = triton.next_power_of_2(n)
    nw = 4 if bn < 2048 else (8 if bn < 8192 else 16)  # Liger's warps for the row (its calculate_settings)
    base = dict(I64=True, RSTD_FIRST=True, ROUND_XHAT=False, W_LATE=False, OFFSET=False)
    out = {
        f"one_row w{nw} liger-like + offset": (nw, {**base, "ROUND_XHAT": True, "OFFSET": True}),
        f"one_row w{nw} i64 rstd-first": (nw, base),
        f"one_row w{nw} i64 rstd-first split": (nw, {**base, "SPLIT": True}),
        f"one_row w{nw} i64 rstd-last split": (nw, {**base, "SPLIT": True, "RSTD_FIRST": False}),
        f"one_row w{nw} i32 rstd-first split": (nw, {**base, "SPLIT": True, "I64": False}),
        f"one_row w{nw} i64 rstd-first split + offset": (nw, {**base, "SPLIT": True, "OFFSET": True}),
    }
    policies = (("", "", ".cs", ""), ("", "", "", "evict_first"), ("", "", ".cg", ""), ("", "evict_first", ".cs", ""),
                (".cg", "", "", ""), (".cg", "", ".cs", ""), ("", "evict_first", "", ""))
    # cache policies of the row's load and store (session 9 run E: none faster; ACCEL_VARIANTS_POLICIES=1)
    for ld_cm, ld_ev, st_cm, st_ev in policies if os.environ.get("ACCEL_VARIANTS_POLICIES") == "1" else ():
        tag = " ".join(f"{k} {v}" for k, v in (("ld", ld_cm or ld_ev), ("st", st_cm or st_ev)) if v)
        out[f"one_row w{nw} {tag}"] = (nw, {**base, "LD_CM": ld_cm, "LD_EV": ld_ev, "ST_CM": st_cm, "ST_EV": st_ev})
    return out


def run_shape(m: int, n: int, rounds: int, timer: Timer, sass_dir: Path | None, kind: str,
              order: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    rstd = torch.empty(m, device="cuda", dtype=torch.float32)
    eps = 1e-6
    bn = triton.next_power_of_2(n)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    runs: dict = {"aten": lambda: torch.ops.aten._fused_rms_norm.default(x, [n], w, eps)}
    notes: dict[str, str] = {}
    compiled: dict = {}
    shipped = rt._kernels().default_config(n)  # the table-miss default
    for rows, nw in sorted({(shipped["rows"], shipped["num_warps"]), (1, 8), (2, 8), (4, 8)}):
        if rows * bn > 16384:
            continue
        cfg = {"looped": False, "block_n": bn, "rows": rows, "num_warps": nw}
        name = f"accel rows {rows} w{nw}"
        runs[name] = (lambda cfg=cfg: rt.launch_fwd(x, w, y, rstd, eps, cfg, m, n))
        k = rt._kernels().rms_norm_fwd_rows[(-(-m // rows),)](
            x, w, y, rstd, m, n, eps, BLOCK_N=bn, ROWS=rows, HAS_W=True, HINTS=False, WIDE=False, num_warps=nw)
        compiled[name] = k
        notes[name] = regs(k)
    for name, (nw, flags) in (one_row_variants(n) if kind == "one-row" else {}).items():
        kw = dict(BLOCK_N=bn, num_warps=nw, **flags)
        try:
            k = one_row[(m,)](x, w, y, rstd, n, eps, 0.0, **kw)
        except Exception as exc:  # noqa: BLE001
            print(f"{name}: compile/launch failed: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        compiled[name], notes[name] = k, regs(k)
        runs[name] = (lambda kw=kw: one_row[(m,)](x, w, y, rstd, n, eps, 0.0, **kw))
    for rows in (1, 2, 4) if kind == "one-row" else ():
        if rows * bn > 16384:
            continue
        for split in (False, True):
            name = f"rows_split r{rows} w8{' split' if split else ''}"
            kw = dict(BLOCK_N=bn, ROWS=rows, SPLIT=split, num_warps=8)
            k = rows_split[(-(-m // rows),)](x, w, y, rstd, m, n, eps, **kw)
            compiled[name], notes[name] = k, regs(k)
            runs[name] = (lambda rows=rows, kw=kw: rows_split[(-(-m // rows),)](x, w, y, rstd, m, n, eps, **kw))
    if kind == "one-row":  # the output's placement: the same kernels into a buffer allocated apart from x
        y2 = torch.empty_like(x)
        cfg4 = {"looped": False, "block_n": bn, "rows": shipped["rows"], "num_warps": shipped["num_warps"]}
        runs["accel default cfg, y apart"] = lambda: rt.launch_fwd(x, w, y2, rstd, eps, cfg4, m, n)
        fresh = {"looped": False, "block_n": bn, "rows": shipped["rows"], "num_warps": shipped["num_warps"]}
        runs["accel default cfg, y fresh"] = lambda: rt.launch_fwd(x, w, torch.empty_like(x), rstd, eps, fresh, m, n)
    for rows, programs, nw, strided, stages, cs in (variants(m, n, sms) if kind == "persistent" else ()):
        name = f"persist r{rows} g{programs} w{nw} s{stages} {'strided' if strided else 'contig'}{' cs' if cs else ''}"
        kw = dict(BLOCK_N=bn, ROWS=rows, STRIDED=strided, STAGES=stages, CS=cs, num_warps=nw)
        try:
            k = persist[(programs,)](x, w, y, rstd, m, n, eps, **kw)
        except Exception as exc:  # noqa: BLE001
            print(f"{name}: compile/launch failed: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        compiled[name], notes[name] = k, regs(k)
        runs[name] = (lambda programs=programs, kw=kw: persist[(programs,)](x, w, y, rstd, m, n, eps, **kw))
    try:
        from liger_kernel.ops import rms_norm as lg

        runs["liger"] = lambda: lg.LigerRMSNormFunction.apply(x, w, eps)
        lw = lg.calculate_settings(n)[1]
        largs = (y, y.stride(0), x, x.stride(0), w, w.stride(0), rstd, rstd.stride(0), n, eps, 0.0, 0)
        k = lg._rms_norm_forward_kernel[(m,)](*largs, elementwise_affine=True, BLOCK_SIZE=bn, num_warps=lw)
        compiled["liger raw"], notes["liger raw"] = k, regs(k)
        runs["liger raw"] = lambda: lg._rms_norm_forward_kernel[(m,)](*largs, elementwise_affine=True,
                                                                      BLOCK_SIZE=bn, num_warps=lw)
    except Exception as exc:  # noqa: BLE001
        print("liger not usable:", type(exc).__name__, exc)
    ref, ref_rstd = torch.ops.aten._fused_rms_norm.default(x, [n], w, eps)
    plain = torch.empty_like(x)
    rows_split[(m,)](x, w, plain, rstd, m, n, eps, BLOCK_N=bn, ROWS=1, SPLIT=False, num_warps=8)
    for name, fn in list(runs.items()):
        y.fill_(float("nan"))
        rstd.fill_(float("nan"))
        out = fn()
        if name in ("aten", "liger") or ", y " in name:  # placement variants: the checked kernel, another output
            continue
        ok = torch.allclose(y.float(), ref.float(), rtol=2e-2, atol=2e-2) and torch.allclose(
            rstd, ref_rstd.view(-1).float(), rtol=1e-3, atol=1e-3)
        if "split" in name and not torch.equal(y, plain):
            print(f"{name}: not bit-identical to the plain epilogue "
                  f"({(y != plain).sum().item()} of {y.numel()} differ)")
        if not ok:
            print(f"{name}: WRONG (max err {(y.float() - ref.float()).abs().nan_to_num(1e9).max().item():.3g}); dropped")
            del runs[name]
    del out
    times: dict[str, list[float]] = {k: [] for k in runs}
    if order == "shuffled":  # position controls: the same launches timed twice, at other places in a round
        for name in ("liger raw", f"accel rows {shipped['rows']} w{shipped['num_warps']}"):
            if name in runs:
                runs[name + " (again)"] = runs[name]
                times[name + " (again)"] = []
    rng = random.Random(0)
    for _ in range(rounds):
        names = list(runs)
        if order == "shuffled":
            rng.shuffle(names)
        for name in names:
            times[name].append(timer(runs[name]))
    base = times.get("liger")
    moved = 2 * m * n * 2
    print(f"rms_norm fwd bf16 {m}x{n}, {sms} SMs, median of {rounds} interleaved rounds of {timer.reps} "
          f"L2-flushed calls")
    ranked = sorted(times.items(), key=lambda kv: statistics.median(kv[1]))
    for name, ts in ranked:
        vs = (f"{statistics.median(b / t for b, t in zip(base, ts)):.3f}x Liger, won "
              f"{sum(b > t for b, t in zip(base, ts))}/{rounds}") if base else ""
        med = statistics.median(ts)
        print(f"  {med:7.1f} us {moved / med / 1e3:6.0f} GB/s  {vs:24s} {name:42s} {notes.get(name, '')}")
    if sass_dir is not None:
        sass_dir.mkdir(parents=True, exist_ok=True)
        best_persist = next((k for k, _ in ranked if k.startswith("persist")), None)
        best_one = next((k for k, _ in ranked if k.startswith("one_row")), None)
        for name in ("liger raw", f"accel rows {shipped['rows']} w{shipped['num_warps']}", best_persist, best_one):
            if name in compiled:
                text = sass(compiled[name])
                (sass_dir / f"{m}x{n}-{name.replace(' ', '_')}.sass").write_text(text or "")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="32768x4096")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--sass", type=Path, default=None)
    p.add_argument("--order", default="shuffled", choices=("shuffled", "fixed"),
                   help="the variants' order in each round: a new shuffle per round (seeded), with two launches "
                        "timed twice as position controls, or the same order every round")
    p.add_argument("--set", default="one-row", choices=("one-row", "persistent"),
                   help="variants beside the controls: one-row kernels (one change each) or persistent grids")
    a = p.parse_args()
    timer = Timer(torch.device("cuda"), a.reps)
    for shape in a.shapes.split(","):
        m, n = map(int, shape.split("x"))
        run_shape(m, n, a.rounds, timer, a.sass, a.set, a.order)
        a.sass = None  # SASS of the first shape only (the device returns a few files)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    _launch.poison_outputs = False
    sys.exit(main())
