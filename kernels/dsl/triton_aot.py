"""Ahead-of-time compile check of Triton kernels for GPU targets this machine does not have.

The PyPI ``triton`` wheel (3.5 and later) compiles a ``@triton.jit`` kernel on the CPU, with no GPU and
no CUDA or ROCm install, to PTX + cubin for NVIDIA (its wheel bundles ``ptxas``) and to AMDGCN for AMD
(it links AMD code in-process; 3.4 needed an ``ld.lld``). This module compiles one kernel
specialization (:class:`Case`) for one target (:data:`TARGETS`), reads what the compilers report
(registers, spills, scratch / local memory, LDS / shared memory, wave size, the widest global load) into
a :class:`Report`, and checks it against the target's limits (:func:`check`).

It never launches anything and imports Triton only inside its functions. Triton must not be in
interpreter mode (``TRITON_INTERPRET=1`` replaces compilation): :func:`compile_case` raises there; run
the check in a process with a clean environment (:func:`clean_env`). Which kernels and configs to compile
is the caller's (the built-in kernels' list: :mod:`accel.kernels.ops.triton_aot_cases`).

:data:`EXCLUSIONS` is the list of (kernel, target) pairs known not to fit, each with its reason, for the
router and ``accel kernels`` to read.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from accel.errors import UnsupportedOperationError

__all__ = ["Case", "EXCLUSIONS", "Exclusion", "Report", "TARGETS", "Target", "check", "clean_env",
           "compile_case", "excluded", "family_support", "load_width", "run_cases", "vector_expected"]


# ------------------------------------------------------------------------------------------------ targets


@dataclass(frozen=True)
class Target:
    """One GPU target and the per-workgroup limits a kernel must fit (the source of each number is beside
    :data:`TARGETS`).

    Attributes:
        name: accel's arch name (``"sm_90"``, ``"gfx942"``), the tuning table's key.
        backend: Triton's backend (``"cuda"`` or ``"hip"``).
        arch: ``GPUTarget``'s arch: compute capability as an int (``90``) or the gfx name.
        warp_size: threads per warp / wavefront (NVIDIA 32; AMD CDNA 64, RDNA 32).
        family: ``"nvidia"``, ``"cdna"`` or ``"rdna"``.
        max_threads: threads per block / workgroup.
        shared_bytes: shared memory (NVIDIA, opt-in maximum per block) or LDS (AMD, per workgroup), bytes.
        regs_per_block: NVIDIA: 32-bit registers per block (0 on AMD).
        max_regs_per_thread: NVIDIA: 255; AMD: addressable VGPRs per lane (arch VGPRs only).
        vgprs_per_simd: AMD: VGPRs per lane of one SIMD's register file (shared by its resident waves).
        vgpr_granule: AMD: VGPR allocation granule; NVIDIA: registers per warp allocation unit.
        simds: AMD: SIMDs a workgroup's waves are spread over (a CU's 4 on CDNA, a WGP's 4 on RDNA in WGP
            mode, 2 in CU mode; read from the code object where it says).
    """

    name: str
    backend: str
    arch: int | str
    warp_size: int
    family: str
    max_threads: int
    shared_bytes: int
    regs_per_block: int = 0
    max_regs_per_thread: int = 255
    vgprs_per_simd: int = 0
    vgpr_granule: int = 256
    simds: int = 4


# NVIDIA numbers: CUDA C++ Programming Guide, "Technical Specifications per Compute Capability" table
# (registers per thread block 64K and per thread 255, threads per block 1024; shared memory per block,
# opt-in: 8.0 163 KB, 9.0 227 KB, 10.0 227 KB, 12.0 99 KB; Triton opts in above 48 KB), and the CUDA
# Occupancy Calculator's register allocation unit (256 registers, per warp).
# AMD numbers: VGPR file per CU from ROCm's libhsakmt (hsakmt_get_vgpr_size_per_cu: 512 KiB on
# gfx90a/gfx94x/gfx950 = 4 SIMDs x 64 lanes x 512 VGPRs; 384 KiB on gfx1100/gfx1101/gfx1200/gfx1201 =
# 2 SIMDs x 32 lanes x 1536 VGPRs); allocation granule and addressable VGPRs from LLVM's
# AMDGPUBaseInfo.cpp (getVGPRAllocGranule: 8 on gfx90a+, 24 in wave32 on 1.5x-VGPR parts;
# getAddressableNumArchVGPRs: 256 arch VGPRs, 512 with AGPRs on gfx90a+); LDS per workgroup 64 KiB
# (CDNA2/CDNA3/RDNA3/RDNA4 ISA guides) and 160 KiB on gfx950 (CDNA4 ISA guide; LLVM's
# getAddressableLocalMemorySize); workgroups of at most 1024 work-items (HIP, every AMD GPU).
_KIB = 1024
TARGETS: dict[str, Target] = {
    "sm_80": Target("sm_80", "cuda", 80, 32, "nvidia", 1024, 163 * _KIB, regs_per_block=65536),
    "sm_90": Target("sm_90", "cuda", 90, 32, "nvidia", 1024, 227 * _KIB, regs_per_block=65536),
    "sm_100": Target("sm_100", "cuda", 100, 32, "nvidia", 1024, 227 * _KIB, regs_per_block=65536),
    "sm_120": Target("sm_120", "cuda", 120, 32, "nvidia", 1024, 99 * _KIB, regs_per_block=65536),
    "gfx90a": Target("gfx90a", "hip", "gfx90a", 64, "cdna", 1024, 64 * _KIB, max_regs_per_thread=256,
                     vgprs_per_simd=512, vgpr_granule=8, simds=4),
    "gfx942": Target("gfx942", "hip", "gfx942", 64, "cdna", 1024, 64 * _KIB, max_regs_per_thread=256,
                     vgprs_per_simd=512, vgpr_granule=8, simds=4),
    "gfx950": Target("gfx950", "hip", "gfx950", 64, "cdna", 1024, 160 * _KIB, max_regs_per_thread=256,
                     vgprs_per_simd=512, vgpr_granule=8, simds=4),
    "gfx1100": Target("gfx1100", "hip", "gfx1100", 32, "rdna", 1024, 64 * _KIB, max_regs_per_thread=256,
                      vgprs_per_simd=1536, vgpr_granule=24, simds=4),
    "gfx1201": Target("gfx1201", "hip", "gfx1201", 32, "rdna", 1024, 64 * _KIB, max_regs_per_thread=256,
                      vgprs_per_simd=1536, vgpr_granule=24, simds=4),
}


# ------------------------------------------------------------------------------------------------ cases


@dataclass(frozen=True)
class Case:
    """One kernel specialization to compile: what ``kernel[grid](...)`` would compile for one launch.

    Attributes:
        op: the tuning table's op name (``"rms_norm_fwd"``).
        kernel: the ``@triton.jit`` function.
        signature: Triton's signature, one entry per argument in order: ``"*bf16"`` (pointer), ``"i32"``,
            ``"fp32"``, ``"constexpr"``.
        constexprs: the constexpr arguments' values, by name.
        aligned: argument names Triton's launcher would mark 16-divisible (pointers at 16-byte aligned
            addresses, integers divisible by 16): the row length and row strides of 16-byte aligned rows.
        num_warps, num_stages: launch options (``num_stages`` ``None``: Triton's default).
        config: the launch config the case stands for (a tuning-table entry's or a default), for reports.
        source: where the config comes from (``"table sm_90 bfloat16 4096x4096"``, ``"default n=4096"``).
        elements: elements of the main tensor one program loads at once (``ROWS x BLOCK_N``, a chunk, a tile).
        row_elements: of which contiguous along a row (``BLOCK_N``).
        element_bytes: bytes per element of the main tensor (2 for bf16).

    The load width asserted on a target is :func:`vector_expected` of these with the target's threads
    (``num_warps x`` its wave size): 16 bytes where each thread holds 16 contiguous bytes of an aligned row.
    """

    op: str
    kernel: Any
    signature: Mapping[str, str]
    constexprs: Mapping[str, Any]
    aligned: tuple[str, ...]
    num_warps: int
    num_stages: int | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    elements: int = 0
    row_elements: int = 0
    element_bytes: int = 2

    @property
    def name(self) -> str:
        """The kernel function's name."""
        return getattr(self.kernel, "__name__", None) or self.kernel.fn.__name__

    def label(self) -> str:
        """A short description: kernel, dtypes and the constexprs and options that vary between cases."""
        dt = sorted({t[1:] for t in self.signature.values() if t.startswith("*") and t != "*fp32"}) or ["fp32"]
        cx = ",".join(f"{k}={_short(v)}" for k, v in self.constexprs.items())
        stages = f",stages={self.num_stages}" if self.num_stages else ""
        return f"{self.name}[{'/'.join(dt)}] {cx},warps={self.num_warps}{stages}"

    def key(self) -> tuple:
        """A hashable identity (for deduplication)."""
        return (self.name, tuple(self.signature.items()), tuple(sorted(self.constexprs.items())), self.aligned,
                self.num_warps, self.num_stages)


def _short(v: Any) -> str:
    return {True: "1", False: "0"}.get(v, str(v)) if isinstance(v, bool) else str(v)


def vector_expected(elements: int, row_elements: int, threads: int, element_bytes: int) -> int:
    """16 where a program of ``elements`` elements over ``threads`` threads gives each thread at least 16
    contiguous bytes of a row of ``row_elements`` (so a 16-byte aligned row can load as 16-byte vectors), else 0.

    >>> vector_expected(4096, 4096, 256, 2)   # 16 bf16 per thread
    16
    >>> vector_expected(128, 128, 128, 2)     # one bf16 per thread: nothing to vectorize
    0
    """
    per_thread = elements // max(1, threads)
    return 16 if per_thread * element_bytes >= 16 and row_elements * element_bytes >= 16 else 0


# ------------------------------------------------------------------------------------------------ reports


@dataclass
class Report:
    """What one compile of one :class:`Case` for one :class:`Target` produced (counts per thread / lane).

    ``regs``: NVIDIA registers per thread (ptxas), AMD VGPRs per lane (arch + accumulation VGPRs on
    gfx90a+); ``sgprs``: AMD scalar registers; ``spills``: NVIDIA spill stores + loads in bytes, AMD
    VGPR + SGPR spill counts; ``scratch``: NVIDIA stack frame + local memory, AMD private segment, bytes
    per thread; ``shared``: shared memory / LDS per block, bytes (static + Triton's dynamic);
    ``load_bytes``: the widest global load instruction, bytes; ``loads``: load width (bytes) -> count;
    ``occupancy``: AMD waves per SIMD LLVM reports; ``wgp_mode``: RDNA workgroup-processor mode (1) or CU
    mode (0); ``problems``: what :func:`check` found (empty: passes); ``error``: the compile's exception text;
    ``excluded``: the :data:`EXCLUSIONS` entry covering this case (``"<kind>: <reason>"``), if any.
    """

    op: str
    kernel: str
    label: str
    source: str
    target: str
    config: dict
    num_warps: int
    warp_size: int = 0
    regs: int = 0
    sgprs: int = 0
    spills: int = 0
    scratch: int = 0
    shared: int = 0
    load_bytes: int = 0
    loads: dict = field(default_factory=dict)
    vector_bytes: int = 0
    occupancy: int = 0
    wgp_mode: int = 1
    seconds: float = 0.0
    error: str = ""
    problems: list = field(default_factory=list)
    excluded: str = ""

    def as_dict(self) -> dict:
        """A JSON-ready dict."""
        d = asdict(self)
        d["loads"] = {str(k): v for k, v in sorted(self.loads.items())}
        return d


# ------------------------------------------------------------------------------------------------ exclusions


@dataclass(frozen=True)
class Exclusion:
    """A kernel's configs that do not pass :func:`check` on some targets, and why.

    Attributes:
        op: the tuning table's op (``"softmax_bwd"``).
        kernel: the ``@triton.jit`` function's name.
        targets: accel arch names.
        when: lower bounds on the launch config that select the excluded configs (``{"num_warps": 32}``:
            32 warps and more; ``{"block_n": 16384}``: rows of 16384 and longer held in registers;
            ``{"element_bytes": 4}``: fp32 rows).
        kind: ``"unfit"`` (cannot launch there: the router must never pick it) or ``"spills"`` (runs, but
            spills registers to local memory: route it only where a measured table entry says it wins).
        reason: the sentence ``accel kernels`` shows.
        tritons: the Triton versions (``(major, minor)``) the misfit was seen with; empty: every version.
    """

    op: str
    kernel: str
    targets: tuple[str, ...]
    when: Mapping[str, int]
    kind: str
    reason: str
    tritons: tuple[tuple[int, int], ...] = ()

    def matches(self, op: str, arch: str, config: Mapping[str, Any], kernel: str | None = None,
                triton: tuple[int, int] | None = None) -> bool:
        """Whether this exclusion covers ``op`` (its ``kernel``, if given) with launch ``config`` on ``arch``
        with Triton version ``triton`` (``(major, minor)``; ``None``: the installed one, read from its
        package metadata)."""
        if op != self.op or arch not in self.targets or kernel not in (None, self.kernel):
            return False
        if self.tritons and (triton or _triton_version()) not in self.tritons:
            return False
        return all(int(config.get(k) or 0) >= v for k, v in self.when.items())


def _triton_version() -> tuple[int, int]:
    """The installed Triton's ``(major, minor)`` from package metadata (no import); ``(0, 0)`` without one."""
    from accel._compat import module_version

    v = module_version("triton")
    parts = [int(p) for p in re.findall(r"\d+", v or "")[:2]]
    return (parts + [0, 0])[0], (parts + [0, 0])[1]


_NV = ("sm_80", "sm_90", "sm_100", "sm_120")
_CDNA = ("gfx90a", "gfx942", "gfx950")
_BWD_SPILL = ("the whole row of x and dy, the weight and the fp32 dW partial in registers need more than the 128 "
              "registers per thread a 512-thread block may have (64K per block): ptxas spills")

#: Known misfits, from the last full run (``benchmarks/aot_targets.py``; its table is
#: ``benchmarks/results/aot/``); every other built-in (kernel, config, target) passes :func:`check`.
#: :func:`excluded` answers for one launch config.
EXCLUSIONS: tuple[Exclusion, ...] = (
    # 16-warp backward rows kernels at 16384: NVIDIA caps registers at 65536 / 512 threads = 128 per thread. AMD
    # fits (CDNA: 88 VGPRs x 4 waves per SIMD of 512; RDNA: 157-168 of 1536 / 4). On the H200 the RMSNorm one still
    # beat ATen (sm_90 table, 8192x16384 bf16: 3142 vs 1581 GB/s): measured spills, kept where the table says.
    Exclusion("rms_norm_bwd", "rms_norm_bwd_rows", _NV, {"block_n": 16384}, "spills", _BWD_SPILL),
    Exclusion("rms_norm_hf_bwd", "rms_norm_hf_bwd", _NV, {"block_n": 16384}, "spills", _BWD_SPILL),
    Exclusion("add_rms_norm_hf_bwd", "rms_norm_hf_bwd", _NV, {"block_n": 16384}, "spills",
              _BWD_SPILL + " (the same kernel with grad_sum's row added: ADD_GRAD)"),
    Exclusion("layer_norm_bwd", "layer_norm_bwd_rows", _NV, {"block_n": 16384}, "spills",
              _BWD_SPILL + " (dW and dB partials: the split kernel, a config with \"split\", does not spill)"),
    # softmax's default for rows of 32768 keeps them in registers: sm_100/sm_120's ptxas fits the bf16 backward in
    # 128 registers, sm_80/sm_90's does not; fp32 (element_bytes 4) spills on all four
    Exclusion("softmax_bwd", "softmax_bwd_rows", ("sm_80", "sm_90"), {"block_n": 32768}, "spills",
              "rows of 32768 y and dy values in registers (64 of each per thread at 16 warps) spill on sm_80/sm_90; "
              "a looped config does not"),
    Exclusion("softmax_bwd", "softmax_bwd_rows", ("sm_100", "sm_120"), {"block_n": 32768, "element_bytes": 4},
              "spills", "fp32 rows of 32768 y and dy values in registers spill; a looped config does not"),
    # the sm_90 table's split config (2 parts of 8192, 8 warps): 32 elements per thread of x, dy, their
    # prefetched next rows, w, dW and dB partials. Wave32 RDNA: triton 3.8 and 3.9 fit it in 244-246 VGPRs,
    # 3.5.1 needs 256 and spills 4-7. sm_90: triton 3.5.1 and 3.9 fit it; 3.8's ptxas spills 24 bytes.
    Exclusion("layer_norm_bwd", "layer_norm_bwd_split", ("gfx1100", "gfx1201"), {"split": 2, "block_n": 8192},
              "spills", "a part of 8192 columns over 256 work-items needs more than the 256 VGPRs a lane may address "
              "(triton 3.5)", tritons=((3, 5),)),
    Exclusion("layer_norm_bwd", "layer_norm_bwd_split", ("sm_90",), {"split": 2, "block_n": 8192}, "spills",
              "a part of 8192 columns over 256 threads spills 24 bytes with triton 3.8's ptxas (3.5, 3.6 and 3.9 "
              "fit it; the H200 table was measured with 3.6)", tritons=((3, 8),)),
    # triton 3.5.1's ptxas spills 16 bytes for the looped forward's online max/sum at 16 values per thread on
    # sm_120; triton 3.8's and 3.9's do not
    Exclusion("softmax_fwd", "softmax_fwd_looped", ("sm_120",), {"block_n": 4096, "num_warps": 8}, "spills",
              "the looped forward spills 16 bytes on sm_120 with triton 3.5's ptxas", tritons=((3, 5),)),
    # 32 warps of 64 are 2048 work-items, twice what an AMD workgroup may have
    *(Exclusion(op, kernel, _CDNA, {"num_warps": 32}, "unfit",
                "num_warps=32 is 2048 work-items per workgroup on a wave64 GPU; at most 1024 are allowed")
      for op, kernel in (("softmax_fwd", "softmax_fwd_rows"), ("softmax_fwd", "softmax_fwd_looped"),
                         ("softmax_bwd", "softmax_bwd_rows"), ("softmax_bwd", "softmax_bwd_looped"))),
)


def excluded(op: str, arch: str, config: Mapping[str, Any], kernel: str | None = None,
             triton: tuple[int, int] | None = None) -> Exclusion | None:
    """The :class:`Exclusion` covering ``op`` (optionally its ``kernel`` function) with launch ``config``
    (``block_n``, ``num_warps``, ..., and ``element_bytes``: 2 for bf16/fp16 rows, 4 for fp32) on ``arch`` with Triton ``triton`` (default: the installed one), or ``None``.

    >>> excluded("softmax_fwd", "gfx942", {"num_warps": 32, "block_n": 4096}).kind
    'unfit'
    >>> excluded("softmax_fwd", "sm_90", {"num_warps": 32, "block_n": 4096}) is None
    True
    """
    for ex in EXCLUSIONS:
        if ex.matches(op, arch, config, kernel, triton):
            return ex
    return None


# ------------------------------------------------------------------------------------------------ compiling


def clean_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) without the variables that switch Triton to interpreting or that
    would hide a compile (``TRITON_INTERPRET``, ``TRITON_ALWAYS_COMPILE`` set to 1 so ptxas runs and logs),
    for a subprocess that runs the AOT check."""
    env = dict(os.environ if base is None else base)
    env.pop("TRITON_INTERPRET", None)
    env["TRITON_ALWAYS_COMPILE"] = "1"
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # triton 3.9's default; set so it does not warn
    return env


def family_support(backend: str) -> tuple[bool, str]:
    """Whether the installed Triton can compile for ``backend`` (``"cuda"`` or ``"hip"``), and why.

    Reads Triton's backend list only (no compile). Triton older than 3.5 links AMD code with an external
    ``ld.lld``: AMD is reported unsupported there unless ``TRITON_HIP_LLD_PATH`` names one.
    """
    try:
        import triton
        from triton.backends import backends
        from triton.compiler import ASTSource  # noqa: F401 - the API this module uses
    except ImportError as exc:
        return False, f"triton does not import: {exc}"
    name = {"cuda": "nvidia", "hip": "amd"}[backend]
    if name not in backends:
        return False, f"triton {triton.__version__} has no {name} backend (has: {sorted(backends)})"
    version = tuple(int(p) for p in re.findall(r"\d+", triton.__version__)[:2])
    if backend == "hip" and version < (3, 5) and not os.environ.get("TRITON_HIP_LLD_PATH"):
        return False, f"triton {triton.__version__} links AMD code with ld.lld: set TRITON_HIP_LLD_PATH"
    return True, f"triton {triton.__version__} {name} backend"


def compile_case(case: Case, target: Target) -> Report:
    """Compile ``case`` for ``target`` and read the result (nothing is launched; 0.3-6 s on one core).

    A compile that raises gives a report with ``error`` set (and a problem), not an exception.

    Raises:
        UnsupportedOperationError: ``TRITON_INTERPRET=1`` in this process (Triton would not compile).
    """
    if os.environ.get("TRITON_INTERPRET", "").strip() == "1":
        raise UnsupportedOperationError(
            "AOT compile check: TRITON_INTERPRET=1 is set in this process, so Triton interprets instead of "
            "compiling. The check needs a compiling Triton: run it in a subprocess with "
            "accel.kernels.dsl.triton_aot.clean_env() as its environment.")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    report = Report(case.op, case.name, case.label(), case.source, target.name, dict(case.config), case.num_warps,
                    vector_bytes=vector_expected(case.elements, case.row_elements, case.num_warps * target.warp_size,
                                                 case.element_bytes))
    ex = excluded(case.op, target.name,
                  {**case.config, "num_warps": case.num_warps, "element_bytes": case.element_bytes}, case.name)
    if ex is not None:
        report.excluded = f"{ex.kind}: {ex.reason}"
    names = list(case.kernel.arg_names)
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in case.aligned}
    options: dict[str, Any] = {"num_warps": case.num_warps}
    if case.num_stages:
        options["num_stages"] = case.num_stages
    src = ASTSource(fn=case.kernel, signature=dict(case.signature), constexprs=dict(case.constexprs), attrs=attrs)
    log = io.StringIO()
    start = time.perf_counter()
    try:
        with _ptxas_log(target), contextlib.redirect_stdout(log):
            compiled = triton.compile(src, target=GPUTarget(target.backend, target.arch, target.warp_size),
                                      options=options)
    except Exception as exc:  # a compile error is a finding of the check, reported per case
        report.seconds = time.perf_counter() - start
        report.error = f"{type(exc).__name__}: {str(exc).strip()[-1500:]}"
        report.problems.append(f"does not compile: {report.error[:300]}")
        return report
    report.seconds = time.perf_counter() - start
    report.shared = int(getattr(compiled.metadata, "shared", 0) or 0)
    report.warp_size = int(getattr(compiled.metadata, "warp_size", target.warp_size) or target.warp_size)
    if target.backend == "hip":
        _read_amdgcn(report, compiled.asm["amdgcn"])
    else:
        _read_ptx(report, compiled.asm["ptx"], log.getvalue())
    report.problems = check(report, target)
    return report


@contextlib.contextmanager
def _ptxas_log(target: Target):
    """Triton prints ptxas's ``-v`` log (registers, spills, stack) for the compiles inside (NVIDIA only)."""
    if target.backend != "cuda":
        yield
        return
    from triton import knobs

    old = knobs.nvidia.dump_ptxas_log
    knobs.nvidia.dump_ptxas_log = True
    try:
        yield
    finally:
        knobs.nvidia.dump_ptxas_log = old


def _field(text: str, key: str) -> int | None:
    m = re.search(r"^\s*" + re.escape(key) + r":\s+(-?\d+)", text, re.M)
    return int(m.group(1)) if m else None


#: AMD global/buffer load mnemonics -> bytes (GCN/CDNA names; RDNA3+ ``_b128`` names).
_AMD_LOAD_BYTES = {"dwordx4": 16, "dwordx3": 12, "dwordx2": 8, "dword": 4, "ushort": 2, "short_d16": 2,
                   "sshort": 2, "ubyte": 1, "sbyte": 1, "b128": 16, "b96": 12, "b64": 8, "b32": 4, "u16": 2,
                   "i16": 2, "d16_b16": 2, "u8": 1, "i8": 1, "short_d16_hi": 2, "d16_hi_b16": 2}


def load_width(instructions: Iterable[str], backend: str) -> dict[int, int]:
    """``{bytes: count}`` of the global loads among ``instructions`` (AMDGCN mnemonics such as
    ``global_load_dwordx4``, or PTX ``ld.global...`` instructions).

    >>> load_width(["global_load_dwordx4", "buffer_load_dword", "global_load_b128"], "hip")
    {16: 2, 4: 1}
    >>> load_width(["ld.global.L1::evict_first.v4.b32", "ld.global.b16"], "cuda")
    {16: 1, 2: 1}
    """
    out: dict[int, int] = {}
    for ins in instructions:
        if backend == "hip":
            suffix = re.sub(r"^(?:global|buffer)_load_", "", ins)
            size = _AMD_LOAD_BYTES.get(suffix)
            if size is None:
                continue
        else:
            m = re.search(r"(?:\.v(\d))?\.[bsuf](\d+)$", ins)
            if not m:
                continue
            size = int(m.group(1) or 1) * int(m.group(2)) // 8
        out[size] = out.get(size, 0) + 1
    return out


def _read_amdgcn(report: Report, asm: str) -> None:
    """Fill ``report`` from the AMDGCN assembly's kernel metadata and instructions."""
    vgpr = _field(asm, ".vgpr_count") or 0
    agpr = _field(asm, ".agpr_count") or 0
    # gfx90a+: arch VGPRs are allocated in blocks of 4 before the AGPRs (LLVM getTotalNumVGPRs)
    report.regs = (-(-vgpr // 4) * 4 + agpr) if agpr else vgpr
    report.sgprs = _field(asm, ".sgpr_count") or 0
    report.spills = (_field(asm, ".vgpr_spill_count") or 0) + (_field(asm, ".sgpr_spill_count") or 0)
    report.scratch = _field(asm, ".private_segment_fixed_size") or 0
    report.shared += _field(asm, ".group_segment_fixed_size") or 0
    report.warp_size = _field(asm, ".wavefront_size") or report.warp_size
    m = re.search(r"^\s*;\s*Occupancy:\s+(\d+)", asm, re.M)
    report.occupancy = int(m.group(1)) if m else 0
    wgp = re.search(r"\.amdhsa_workgroup_processor_mode\s+(\d)", asm)
    report.wgp_mode = int(wgp.group(1)) if wgp else 1
    ins = re.findall(r"^\s+((?:global|buffer)_load_\w+)", asm, re.M)
    report.loads = load_width(ins, "hip")
    report.load_bytes = max(report.loads, default=0)


def _read_ptx(report: Report, ptx: str, log: str) -> None:
    """Fill ``report`` from the PTX's loads and ptxas's ``-v`` log."""
    m = re.search(r"Used (\d+) registers", log)
    report.regs = int(m.group(1)) if m else 0
    if not m:
        report.problems.append("no ptxas log (registers unknown)")
    stack = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if stack:
        report.scratch = int(stack.group(1))
        report.spills = int(stack.group(2)) + int(stack.group(3))
    lmem = re.search(r"(\d+) bytes lmem", log)
    report.scratch += int(lmem.group(1)) if lmem else 0
    smem = re.search(r"(\d+) bytes smem", log)
    report.shared += int(smem.group(1)) if smem else 0
    ins = re.findall(r"\b(ld\.global[\w.:]*)", ptx)
    report.loads = load_width(ins, "cuda")
    report.load_bytes = max(report.loads, default=0)


# ------------------------------------------------------------------------------------------------ checks


def check(report: Report, target: Target) -> list[str]:
    """The problems of ``report`` on ``target`` (empty: it passes): register or scratch spills, a wave size
    other than the target's, a load narrower than the case's ``vector_bytes``, and resource use beyond the
    target's limits (threads per block, registers x threads, shared memory / LDS)."""
    problems = list(report.problems)
    if report.error:
        return problems
    threads = report.num_warps * target.warp_size
    if report.spills:
        problems.append(f"register spills: {report.spills}")
    if report.scratch:
        problems.append(f"scratch/local memory: {report.scratch} bytes per thread")
    if report.warp_size != target.warp_size:
        problems.append(f"wave size {report.warp_size}, expected {target.warp_size}")
    if report.vector_bytes and report.load_bytes < report.vector_bytes:
        problems.append(f"widest global load {report.load_bytes} bytes, expected {report.vector_bytes} "
                        f"(loads by width: {report.loads})")
    if threads > target.max_threads:
        problems.append(f"{threads} threads per block > {target.max_threads}")
    if report.shared > target.shared_bytes:
        problems.append(f"shared memory {report.shared} bytes > {target.shared_bytes}")
    if report.regs > target.max_regs_per_thread and target.family == "nvidia":
        problems.append(f"{report.regs} registers per thread > {target.max_regs_per_thread}")
    if target.family == "nvidia":
        per_warp = -(-report.regs * target.warp_size // target.vgpr_granule) * target.vgpr_granule
        if per_warp * report.num_warps > target.regs_per_block:
            problems.append(f"{report.regs} registers x {threads} threads ({per_warp * report.num_warps} "
                            f"allocated) > {target.regs_per_block} per block")
    else:
        simds = target.simds if report.wgp_mode else 2  # RDNA in CU mode: a CU's 2 SIMDs
        waves_per_simd = -(-report.num_warps // simds)
        alloc = -(-max(report.regs, 1) // target.vgpr_granule) * target.vgpr_granule
        if waves_per_simd * alloc > target.vgprs_per_simd:
            problems.append(f"{report.regs} VGPRs x {waves_per_simd} waves per SIMD ({waves_per_simd * alloc}) "
                            f"> {target.vgprs_per_simd} VGPRs per SIMD lane")
    return problems


# ------------------------------------------------------------------------------------------------ running


def _work(item: tuple[Case, str]) -> Report:
    case, target = item
    return compile_case(case, TARGETS[target])


#: The items of the :func:`run_cases` call in progress, read by its forked workers by index (a
#: ``@triton.jit`` function does not pickle: its module name is bound to the wrapper object).
_ITEMS: list[tuple[Case, str]] = []


def _work_index(i: int) -> Report:
    return _work(_ITEMS[i])


def run_cases(cases: Sequence[Case], targets: Sequence[str], *, jobs: int = 1,
              progress: Callable[[int, int, Report], None] | None = None) -> list[Report]:
    """Compile every case for every target (``jobs`` processes; 1: in this process), in the order
    ``cases`` x ``targets``; ``progress(done, total, report)`` after each compile.

    Raises:
        UnsupportedOperationError: as :func:`compile_case`.
    """
    items = [(c, t) for c in cases for t in targets]
    out: list[Report] = []
    if jobs <= 1:
        for i, item in enumerate(items):
            out.append(_work(item))
            if progress:
                progress(i + 1, len(items), out[-1])
        return out
    import multiprocessing

    # fork: the children inherit the cases (and their kernels) through _ITEMS; only indices and reports travel
    _ITEMS[:] = items
    try:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            for i, report in enumerate(pool.imap(_work_index, range(len(items)), chunksize=1)):
                out.append(report)
                if progress:
                    progress(i + 1, len(items), report)
    finally:
        _ITEMS.clear()
    return out
