"""The tuning table: per (op, arch, dtype, shape bucket), which implementation wins and with which config.

An *entry* says, for one kernel op (``"softmax_fwd"``, ``"layer_norm_bwd"``,
``"rms_norm_fwd"``, ...), one arch (``"sm_90"``), one dtype name
(``"bfloat16"``) and one shape bucket of ``[M, N]``, which implementation won
when measured (``"aten"``, ``"triton"``, ``"helion"`` or ``"cutedsl"``) and the
kernel config that won (a dict: Triton launch parameters, ``helion.Config`` keyword
arguments, or a CuTeDSL kernel's ``{"cluster", "threads"}``). Buckets are ``(next_pow2(N), next_pow2(M))``.

Where the tables come from, in increasing priority:

1. shipped defaults inside the package, ``accel/kernels/tuning/<arch>.json``
   (one file per measured arch; package data);
2. the user cache, ``<platformdirs user_cache_dir("accel")>/tuning/<arch>.json``
   (``ACCEL_TUNING_DIR`` overrides the directory), written by
   ``accel bench --tune`` (:func:`write_user_table`): merged under a
   ``filelock`` lock and replaced atomically (``os.replace`` of a temporary file
   in the same directory), so concurrent processes never see a torn file.

Each file says what it was made for (schema ``format``, ``arch``, and the version of each DSL it names:
:mod:`.files`). A user table that cannot be read, or that does not fit this machine (measured on another arch
or with another release of a DSL it names) or contradicts itself, is ignored as a whole with one
:class:`~accel.errors.TuningTableWarning` naming the file and why; it is never applied in part. A table that
fits keeps working across accel upgrades: the accel version that wrote it is no condition.

Both are read once per arch and folded into one dict keyed by
``(op, dtype, n_bucket, m_bucket)``: the routed path does one dict lookup per
call (:func:`lookup`), never a benchmark.

One routing policy for every vendor and arch (``sm_90``, ``gfx942``, ``gfx1100``, ``pvc``, ...): an
``(op, arch, dtype, shape bucket)`` routes to a DSL's kernel only

1. where a table entry names that DSL (an entry naming ``"aten"`` sends its bucket to ATen, one naming
   another DSL makes this DSL decline), or
2. on a miss, where that arch's table declares a *default* for the op, dtype and DSL: a measured floor
   ``min_numel`` (the kernel takes misses of at least that many elements; ``defaults`` in the file, each
   with the ``source`` of its number: :func:`defaults`).

Everything else declines, with the reason (``"no tuning entry for gfx942 fp16 ...: run `accel bench
--tune`"``): on an arch without a table nothing is guessed, the kernels are installed and decline until
``accel bench --tune`` on that machine measures ATen against each kernel and writes the user table.
:data:`MIN_NUMEL` overrides the declared defaults per DSL for this process (tests, diagnostic scripts).

Run time never autotunes: Helion kernels are always built with an explicit config (this table's, or
the op's fixed default), and ``accel bench --tune`` times an explicit list of configs itself rather than
entering Helion's autotuner, whose one-config initial population fails as a whole when its benchmark
subprocess cannot start (the Helion autotune probe in ``benchmarks/results/h200/README.md``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from accel import _caches
from accel._once import warn_once
from accel.errors import TuningTableError, TuningTableWarning

from . import files
from .files import (
    DEFAULT_KEYS,
    DTYPE_NAMES,
    ENTRY_KEYS,
    FILE_KEYS,
    FORMAT,
    IMPLS,
    MIN_ROUNDS,
    MIN_SPEEDUP,
    OPS,
    TUNING_DIR_ENV,
    bucket,
    check_defaults,
    check_entries,
    check_file,
    declare_ops,
    dtype_name,
    shipped_path,
    user_table_path,
)

__all__ = ["Choice", "DEFAULT_KEYS", "DTYPE_NAMES", "Default", "ENTRY_KEYS", "FILE_KEYS", "FORMAT", "IMPLS",
           "MIN_NUMEL", "MIN_ROUNDS", "MIN_SPEEDUP", "OPS", "TUNING_DIR_ENV", "arch_state", "bucket",
           "check_defaults", "check_entries", "check_file", "config", "declare_ops", "defaults", "dtype_name",
           "dtype_short", "floor", "lookup", "miss_floor", "reload", "route", "shipped_path", "table", "takes",
           "unmeasured", "user_table_path", "write_user_table"]


class _Policy(dict):
    """A dict whose every change forgets the floors (:func:`floor`) and bumps :data:`GENERATION`,
    so accel's router never keeps a size gate computed from an older policy."""

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        forget_floors()

    def __delitem__(self, key):
        super().__delitem__(key)
        forget_floors()

    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        forget_floors()

    def pop(self, *args):
        out = super().pop(*args)
        forget_floors()
        return out

    def clear(self):
        super().clear()
        forget_floors()

    def popitem(self):
        out = super().popitem()
        forget_floors()
        return out

    def setdefault(self, key, default=None):
        out = super().setdefault(key, default)
        forget_floors()
        return out

    def __ior__(self, other):
        self.update(other)
        return self


#: A floor this large means: only where a table entry routes to the DSL.
TABLE_ONLY = 1 << 62
#: Per-DSL overrides of every arch's declared miss floor (:func:`defaults`), for this process: a DSL named
#: here takes misses of at least this many elements on every arch, whatever the tables declare. Only
#: CuTeDSL is named by default, with :data:`TABLE_ONLY`: its kernels serve only the buckets a table names
#: for them (their row-length constraints and 37 µs host cost per launch make a miss no evidence of a win:
#: ``ci/gpu/cutedsl_smoke.py`` on the H200). Tests and diagnostic scripts set
#: ``MIN_NUMEL["triton"] = 0`` to route tiny interpreter shapes. Changing it takes effect at once (conds
#: and router). Triton's and Helion's floors are the tables' (the 2**20 floor measured on sm_90 is the
#: ``sm_90`` table's declared default, ``kernels/tuning/sm_90.json``).
MIN_NUMEL: dict[str, int] = _Policy({"cutedsl": TABLE_ONLY})


def dtype_short(dtype: str) -> str:
    """``"float16"`` -> ``"fp16"``, ``"bfloat16"`` -> ``"bf16"``, ``"float32"`` -> ``"fp32"`` (as users say them)."""
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(dtype, dtype)


def bucket_text(m: int, n: int) -> str:
    """The bucket of ``[m, n]`` as users write shapes, ``MxN``: ``"M<=4096 x N<=4096"``."""
    nb, mb = bucket(m, n)
    return f"M<={mb} x N<={nb}"


@dataclass(frozen=True)
class Default:
    """One declared default of an arch's table: ``impl`` takes misses of ``op`` in ``dtype`` of at least
    ``min_numel`` elements.

    Attributes:
        min_numel: the floor, elements (``>= 0``).
        source: ``"user"`` or ``"shipped"`` (which file declared it).
        why: where the number comes from (the file's ``source`` text of the default).
    """

    min_numel: int
    source: str = "shipped"
    why: str = ""

    @property
    def label(self) -> str:
        """The label of :attr:`why`: its text up to the first ``:`` (what :func:`route` says of the default)."""
        return self.why.split(":")[0]


@dataclass(frozen=True)
class Choice:
    """One table entry: the winner for a bucket.

    Attributes:
        impl: ``"aten"``, ``"triton"``, ``"helion"`` or ``"cutedsl"``.
        config: the winning kernel config (``None``: the DSL's default).
        source: ``"user"`` (user cache) or ``"shipped"`` (package data).
        us: measured times per implementation, µs (evidence; may be empty).
        unfit: why ``config`` cannot launch on the table's arch (:func:`unfit_reason`; ``""``: it can). Such an
            entry routes nothing: :func:`takes` is false and :func:`route` gives this reason.
    """

    impl: str
    config: Mapping[str, Any] | None = None
    source: str = "shipped"
    us: Mapping[str, float] = field(default_factory=dict)
    unfit: str = ""



def unfit_reason(op: str, dsl: str, arch: str, dtype: torch.dtype, config: Mapping[str, Any] | None) -> str | None:
    """Why ``dsl``'s kernel of ``op`` with launch ``config`` cannot launch on ``arch`` in ``dtype``, else ``None``.

    Only Triton configs are judged, by the ``"unfit"`` exclusions of the AOT compile check
    (:data:`accel.kernels.dsl.triton_aot.EXCLUSIONS`, e.g. 32 warps on a wave64 GPU: 2048 work-items where 1024
    is the limit). Configs that only spill are not unfit: a measured entry decides those. Read when a table
    is loaded and by ``accel bench --tune`` (which never times such a config), never per call.
    """
    if dsl != "triton" or not config:
        return None
    from accel.kernels.dsl.triton_aot import excluded

    ex = excluded(op, arch, {**config, "element_bytes": dtype.itemsize})
    return ex.reason if ex is not None and ex.kind == "unfit" else None


def _fold(into: dict, entries: Iterable[Mapping[str, Any]], source: str, arch: str = "") -> None:
    """Fold checked entries (:func:`check_entries`) into ``into``, each judged by :func:`unfit_reason` for
    ``arch`` (``""``: not judged)."""
    for e in entries:
        impl, config = e.get("impl"), e.get("config") or None
        key = (e["op"], e["dtype"], *bucket(int(e["m"]), int(e["n"])))
        dtype = getattr(torch, e["dtype"], None)
        unfit = unfit_reason(e["op"], impl, arch, dtype, config) if isinstance(dtype, torch.dtype) else None
        into[key] = Choice(impl, config, source, dict(e.get("us") or {}), unfit or "")



#: (file, reason) of every user table refused in this process: each is said once (:func:`reload` re-reads the
#: files but does not say the same refusal again).
_SAID: set = set()


def _read(arch: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """``(shipped, user)``: the parsed tables of ``arch`` (:func:`files.parse`), ``None`` where there is no such
    file or the user table is refused (said once: :data:`_SAID`).

    Raises:
        TuningTableError: the shipped table is unreadable or inconsistent (the package data is broken).
    """
    shipped_data = user_data = None
    shipped = shipped_path(arch)
    if shipped.is_file():
        shipped_data = files.parse(shipped.read_text(), str(shipped))
        why = files.misfit(shipped_data, arch, shipped=True)
        if why is not None:
            raise TuningTableError(f"accel.kernels shipped tuning table {shipped}: {why}. The package data is "
                                   f"inconsistent: reinstall accel.")
    user = user_table_path(arch)
    if user.is_file():
        try:
            user_data = files.parse(user.read_text(), str(user))
        except Exception as exc:  # noqa: BLE001 - any malformed user file (entries not dicts, bad numbers, ...)
            _refuse(user, f"unreadable ({type(exc).__name__}: {exc})")
            return shipped_data, None
        why = files.misfit(user_data, arch)
        if why is not None:
            _refuse(user, f"does not fit this machine: {why}.")
            return shipped_data, None
    return shipped_data, user_data


def _refuse(path: Path, why: str) -> None:
    """Say once that the user table ``path`` is ignored as a whole, and why."""
    message = (f"accel.kernels: user tuning table {path} {why} Ignored as a whole: shipped defaults apply (ATen "
               f"where there are none). Fix it, or delete it and re-run accel bench --tune.")
    warn_once(_SAID, (str(path), why), message, TuningTableWarning, stacklevel=4)


@functools.cache
def table(arch: str) -> dict[tuple[str, str, int, int], Choice]:
    """The folded table of ``arch``: shipped entries, then the user cache's over them.

    Keys are ``(op, dtype name, n_bucket, m_bucket)``. Read once per arch (:func:`reload` forgets it). A user
    file that is unreadable or does not fit this machine (:func:`accel.kernels.tuning.files.misfit`) is
    ignored as a whole, with one :class:`~accel.errors.TuningTableWarning`.
    """
    out: dict[tuple[str, str, int, int], Choice] = {}
    shipped, user = _read(arch)
    if shipped is not None:
        _fold(out, shipped["entries"], "shipped", arch)
    if user is not None:
        staged: dict[tuple[str, str, int, int], Choice] = {}
        try:
            _fold(staged, user["entries"], "user", arch)
        except Exception as exc:  # noqa: BLE001 - an entry the checks let through that still cannot fold
            _refuse(user_table_path(arch), f"unreadable ({type(exc).__name__}: {exc})")
        else:
            out.update(staged)
    forget_floors()  # a table loaded after the floors were computed may hold smaller buckets
    return out


@functools.cache
def defaults(arch: str) -> dict[tuple[str, str, str], Default]:
    """The declared defaults of ``arch``: ``(op, dtype name, impl) -> Default``, the user file's over the
    shipped file's (empty for an arch without a table: there nothing takes a miss).

    Read once per arch (:func:`reload` forgets it). A refused user file is ignored (:func:`table` says why,
    once).

    Example:
        >>> from accel.kernels.tuning import table
        >>> table.defaults("sm_90")[("rms_norm_fwd", "bfloat16", "triton")].min_numel
        1048576
        >>> table.defaults("gfx942")
        {}
    """
    out: dict[tuple[str, str, str], Default] = {}
    for data, source in zip(_read(arch), ("shipped", "user")):
        if data is None:
            continue
        sources = data.get("sources") or {}
        for d in data.get("defaults") or []:
            why = str(sources.get(d["source"], d["source"])) if isinstance(sources, Mapping) else str(d["source"])
            out[(d["op"], d["dtype"], d["impl"])] = Default(int(d["min_numel"]), source, why)
    return out


def reload() -> None:
    """Forget the folded tables and floors (the next :func:`lookup` re-reads the files).

    :func:`accel.clear_cache` calls it (the folded tables are a detection cache of :mod:`accel._caches`:
    ``ACCEL_TUNING_DIR`` and the files may have changed); forgetting the floors bumps :data:`GENERATION`,
    which drops every kernel override's memoised cond answers too.
    """
    _TABLE.cache_clear()  # the cache itself: tests may replace the module's name ``table`` with a stand-in
    _DEFAULTS.cache_clear()
    forget_floors()


_TABLE = _caches.register(table, clear=reload)
_DEFAULTS = _caches.register(defaults, clear=reload)


def lookup(op: str, arch: str, dtype: str, m: int, n: int) -> Choice | None:
    """The entry for ``[m, n]`` of ``op`` on ``arch`` in ``dtype``, or ``None`` (a miss). One dict lookup."""
    t = table(arch)
    if not t:
        return None
    return t.get((op, dtype, *bucket(m, n)))



#: DSLs whose kernels take only some row lengths of a bucket (CuTeDSL's cover the rows that split into
#: 16-byte vectors per thread). Where a table entry names such a DSL and no registered kernel of it covers
#: rows of ``n``, the entry counts as a miss for the other DSLs (the bucket was measured on one N; its
#: neighbours must not fall to ATen).
PARTIAL_DSLS = ("cutedsl",)
#: ``(op, dsl)`` -> the ``covers(n, dtype_name) -> bool`` of each registered kernel of a partial DSL
#: (:func:`add_coverage`; the registry adds one per registration whose cond carries ``coverage``).
COVERAGE: dict[tuple[str, str], list] = {}


def add_coverage(op: str, dsl: str, covers: Any) -> None:
    """Record that a registered ``dsl`` kernel of ``op`` takes the rows ``covers(n, dtype_name)`` accepts."""
    COVERAGE.setdefault((op, dsl), []).append(covers)


def remove_coverage(op: str, dsl: str, covers: Any) -> None:
    """Undo one :func:`add_coverage` (its registration is gone)."""
    found = COVERAGE.get((op, dsl), [])
    if covers in found:
        found.remove(covers)
    if not found:
        COVERAGE.pop((op, dsl), None)


def _named(hit: Choice | None, op: str, dtype: str, n: int) -> Choice | None:
    """``hit``, or ``None`` where it names a DSL of :data:`PARTIAL_DSLS` whose registered kernels cannot take
    rows of ``n`` (or none is registered)."""
    if hit is None or hit.impl not in PARTIAL_DSLS:
        return hit
    return hit if any(covers(n, dtype) for covers in COVERAGE.get((op, hit.impl), ())) else None


def miss_floor(op: str, dsl: str, arch: str, dtype: str) -> int:
    """Fewest elements ``dsl``'s kernel of ``op`` takes on a table miss on ``arch`` in ``dtype``.

    :data:`MIN_NUMEL`'s value where it names ``dsl`` (this process's override), else the floor ``arch``'s
    table declares for ``(op, dtype, dsl)`` (:func:`defaults`), else :data:`TABLE_ONLY` (no declared
    default: misses decline).
    """
    override = MIN_NUMEL.get(dsl)
    if override is not None:
        return override
    d = defaults(arch).get((op, dtype, dsl))
    return TABLE_ONLY if d is None else d.min_numel


def takes(op: str, dsl: str, arch: str, dtype: str, m: int, n: int) -> bool:
    """Whether ``dsl``'s kernel should take ``[m, n]``: :func:`route` without the sentence (the per-call form)."""
    t = table(arch)
    hit = t.get((op, dtype, 1 << max(n - 1, 0).bit_length(), 1 << max(m - 1, 0).bit_length())) if t else None
    if hit is not None and hit.impl != dsl:
        hit = _named(hit, op, dtype, n)
    if hit is None:
        return m * n >= miss_floor(op, dsl, arch, dtype)
    return hit.impl == dsl and not hit.unfit


def floor(op: str, dsl: str) -> int:
    """Fewest elements ``dsl``'s kernel of ``op`` may take on any arch: below it :func:`takes` is false.

    The least of: the smallest input of any table bucket naming ``dsl``, and :data:`MIN_NUMEL`'s override
    where it names ``dsl``, else every arch's declared default floor for ``(op, *, dsl)`` (:func:`defaults`),
    over every shipped and user table on disk; :data:`TABLE_ONLY` where none routes ``dsl`` at all. A cond
    rejects smaller inputs with one ``numel()`` before it looks at anything else (the 8-element call costs
    almost nothing over the router itself). Cached; :func:`reload` forgets it.
    """
    least = _FLOORS.get((op, dsl))
    if least is None:
        least = TABLE_ONLY
        for arch in _table_archs():
            for (e_op, _dtype, n_b, m_b), choice in table(arch).items():
                if e_op == op and choice.impl == dsl:  # the bucket holds m > m_b/2, n > n_b/2
                    least = min(least, max(1, m_b // 2) * max(1, n_b // 2))
            if dsl not in MIN_NUMEL:
                for (d_op, _dtype, impl), d in defaults(arch).items():
                    if d_op == op and impl == dsl:
                        least = min(least, d.min_numel)
        _FLOORS[(op, dsl)] = least
    override = MIN_NUMEL.get(dsl)
    return least if override is None or least < override else override


def _table_archs() -> set[str]:
    """Archs with a shipped or user table file."""
    archs = {p.name.removesuffix(".json") for p in resources.files("accel.kernels").joinpath("tuning").iterdir()
             if p.name.endswith(".json")}
    user_dir = user_table_path("x").parent
    if user_dir.is_dir():
        archs.update(p.stem for p in user_dir.glob("*.json"))
    return archs


_FLOORS: dict[tuple[str, str], int] = {}
#: Bumped whenever the floors are forgotten: a router that caches ``min(floor(...))`` over its
#: overrides (:mod:`accel.kernels.core.router`) recomputes it when this changes.
GENERATION = 0


def forget_floors() -> None:
    """Forget the cached floors and bump :data:`GENERATION` (registrations or tables changed)."""
    global GENERATION
    _FLOORS.clear()
    GENERATION += 1


#: The command that measures a table on the machine it runs on (said in every "not tuned" reason).
TUNE_COMMAND = "accel bench --tune"


def route(op: str, dsl: str, arch: str, dtype: str, m: int, n: int) -> str | None:
    """Whether ``dsl``'s kernel should take ``[m, n]``: ``None`` (yes) or the reason it should not.

    Hit: yes iff the entry names ``dsl``. Miss: yes iff ``m * n >= miss_floor(...)`` (:func:`miss_floor`:
    this process's :data:`MIN_NUMEL` override, else ``arch``'s declared default). An entry naming another
    DSL whose kernels cannot take rows of ``n`` (:data:`PARTIAL_DSLS`) counts as a miss.

    Example:
        >>> from accel.kernels.tuning import table
        >>> print(table.route("rms_norm_fwd", "triton", "gfx942", "float16", 4096, 4096))  # doctest: +ELLIPSIS
        no tuning entry for gfx942 fp16 (rms_norm_fwd, bucket M<=4096 x N<=4096) and no declared default for triton: run `accel bench --tune` on this GPU ...
    """
    hit = lookup(op, arch, dtype, m, n)
    if hit is not None and hit.impl != dsl:
        hit = _named(hit, op, dtype, n)
    if hit is None:
        override = MIN_NUMEL.get(dsl)
        if override is not None:
            if override >= TABLE_ONLY:
                return (f"no tuning-table entry for {op} {dtype} bucket {bucket_text(m, n)} on {arch}: {dsl} kernels "
                        f"run only where a table routes them (tuning.MIN_NUMEL[{dsl!r}] is 2**62; {TUNE_COMMAND} "
                        f"measures a table for this GPU)")
            if m * n < override:
                return (f"{m * n} elements < tuning.MIN_NUMEL[{dsl!r}]={override} (this process's override of the "
                        f"tables' floors) and no table entry")
            return None
        d = defaults(arch).get((op, dtype, dsl))
        if d is None:
            return (f"no tuning entry for {arch} {dtype_short(dtype)} ({op}, bucket {bucket_text(m, n)}) and no "
                    f"declared default for {dsl}: run `{TUNE_COMMAND}` on this GPU (it measures ATen against each "
                    f"kernel and writes the user table {user_table_path(arch)}); until then ATen runs")
        if m * n < d.min_numel:
            return (f"{m * n} elements < {d.min_numel}, the {d.source} {arch} table's default floor for {op} "
                    f"{dtype_short(dtype)} ({dsl}; {d.label}) and no entry for bucket {bucket_text(m, n)}")
        return None
    if hit.impl == dsl:
        if not hit.unfit:
            return None
        return (f"the {hit.source} tuning table for {arch} names triton config {dict(hit.config or {})} for {op} "
                f"{dtype_short(dtype)}, which cannot launch there: {hit.unfit}; re-run `{TUNE_COMMAND}`")
    return f"the {hit.source} tuning table for {arch} picks {hit.impl} for {op} {dtype} bucket {bucket_text(m, n)}"


def unmeasured(default: Default) -> bool:
    """Whether a declared default's source labels its floor as not measured (``"fp16, not measured on the
    H200: ..."``: the label is the text up to the first ``:``).

    Example:
        >>> from accel.kernels.tuning import table
        >>> d = table.defaults("sm_90")
        >>> [table.unmeasured(d[("rms_norm_fwd", dtype, "triton")]) for dtype in ("bfloat16", "float16")]
        [False, True]
    """
    return "not measured" in default.label


def arch_state(op: str, dsl: str, arch: str) -> str:
    """One line on how ``arch``'s tables route ``dsl``'s kernel of ``op`` (``accel kernels`` shows it).

    ``"tuned for sm_90: 5 entries (shipped) naming it; default floors for bf16, fp16, fp32 (not measured:
    fp16, fp32)"``, or ``"not tuned for gfx942: run `accel bench --tune`"`` where no entry names ``dsl`` and
    no default is declared for it (every call declines). A default floor is "not measured" where the label
    of its source (its text up to the first ``:``, as :func:`route` says it) says so: the floor routes the
    misses, but no run measured it (:func:`unmeasured`). Reads the table files (cached).

    Example:
        >>> from accel.kernels.tuning import table
        >>> table.arch_state("softmax_fwd", "triton", "gfx942")
        'not tuned for gfx942: run `accel bench --tune`'

    """
    entries = [(c.source, key[1]) for key, c in table(arch).items() if key[0] == op and c.impl == dsl]
    declared = {k[1]: d for k, d in defaults(arch).items() if k[0] == op and k[2] == dsl}
    floors = sorted(declared)
    if dsl in MIN_NUMEL and MIN_NUMEL[dsl] < TABLE_ONLY:
        return f"tuning.MIN_NUMEL[{dsl!r}]={MIN_NUMEL[dsl]} set in this process: takes misses on every arch"
    if not entries and not floors:
        return f"not tuned for {arch}: run `{TUNE_COMMAND}`"
    parts = []
    if entries:
        sources = ", ".join(sorted({s for s, _ in entries}))
        parts.append(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} ({sources}) naming it")
    if floors:
        guessed = [dtype_short(f) for f in floors if unmeasured(declared[f])]
        parts.append("default floors for " + ", ".join(dtype_short(f) for f in floors)
                     + (f" (not measured: {', '.join(guessed)})" if guessed else ""))
    else:
        parts.append("no default floor (misses decline)")
    return f"tuned for {arch}: " + "; ".join(parts)


def config(op: str, dsl: str, arch: str, dtype: str, m: int, n: int) -> Mapping[str, Any] | None:
    """The tuned config of ``dsl``'s kernel for ``[m, n]``, or ``None`` (use the kernel's default)."""
    hit = lookup(op, arch, dtype, m, n)
    return hit.config if hit is not None and hit.impl == dsl else None


def write_user_table(arch: str, entries: Iterable[Mapping[str, Any]], *, path: Path | None = None,
                     defaults: Iterable[Mapping[str, Any]] | None = None) -> Path:
    """Merge ``entries`` (and declared ``defaults``) into the user table of ``arch`` and write it atomically,
    under a file lock.

    Entries with the same ``(op, dtype, bucket)`` as an existing one replace it; defaults with the same
    ``(op, dtype, impl)`` likewise (:func:`check_defaults` says what one holds).
    Safe under concurrent writers: the read-merge-write runs under
    ``filelock.FileLock(<path>.lock)`` and the new file replaces the old with
    ``os.replace`` (readers see the old or the new file, never a torn one). The file's header says what it was
    made for: ``format``, ``arch``, ``dsls`` (the installed version of each DSL it names) and ``accel`` (the
    writer's version, for readers only) (:mod:`accel.kernels.tuning.files`).

    Args:
        arch: ``"sm_90"`` etc.
        entries: dicts with ``op``, ``dtype``, ``m``, ``n``, ``impl`` and optionally ``config``, ``us``,
            ``rounds``.
        path: the file (default :func:`user_table_path`).
        defaults: declared miss floors, dicts of :data:`DEFAULT_KEYS` (``None``: keep the file's).

    Returns:
        The path written.

    Raises:
        TuningTableError: (a ``KernelRegistrationError``) ``arch`` is not an arch name (it names the
            file: ``sm_90``, ``gfx942``), ``entries`` is not a list of entry dicts, or an entry has a
            key it does not know, misses one, or names an unknown op, dtype or impl, or a DSL accel has no
            kernel of the op in (the message names the closest valid ones); nothing was written.

    Warns:
        TuningTableWarning: the existing file was unreadable, or does not fit this machine (measured on another
            arch or with another release of a DSL it names); it was moved aside to ``<name>.unreadable-<time>``
            (named in the message) before the new table was written, and none of its entries were merged.
    """
    out = files.write(arch, entries, path=path, defaults=defaults)
    reload()
    return out
