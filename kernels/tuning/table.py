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

Both are read once per arch and folded into one dict keyed by
``(op, dtype, n_bucket, m_bucket)``: the routed path does one dict lookup per
call (:func:`lookup`), never a benchmark. A miss (no entry for the bucket)
means: the DSL kernel with its default config for inputs of at least
:data:`MIN_NUMEL` elements (the kernels are written to approach copy
bandwidth; measured so on sm_90: ``benchmarks/results/h200/``), ATen below it (no evidence the
kernel wins: launch overhead dominates there). An entry naming ``"aten"`` sends
that bucket to ATen; an entry naming another DSL makes this DSL decline.

Run time never autotunes: Helion kernels are always built with an explicit config (this table's, or
the op's fixed default), and ``accel bench --tune`` times an explicit list of configs itself rather than
entering Helion's autotuner, whose one-config initial population fails as a whole when its benchmark
subprocess cannot start (``ci/gpu/helion_autotune_probe.py`` reproduces each cause).
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from accel import _caches
from accel._options import check_keys, closest, did_you_mean
from accel.errors import TuningTableError

__all__ = ["Choice", "ENTRY_KEYS", "FILE_KEYS", "IMPLS", "MIN_NUMEL", "TUNING_DIR_ENV", "bucket", "check_entries",
           "check_file", "dtype_name", "floor", "lookup", "reload", "config", "route", "takes", "shipped_path", "table",
           "user_table_path", "write_user_table"]

#: Implementations an entry may name.
IMPLS = ("aten", "triton", "helion", "cutedsl")
#: The kernel ops a table entry can name (op family and direction), declared by the op families
#: (:func:`declare_ops`; ``accel.kernels`` declares every built-in family when it is imported).
OPS: list[str] = []
#: Environment variable: directory of the user tables (default: platformdirs' user cache dir + ``/tuning``).
TUNING_DIR_ENV = "ACCEL_TUNING_DIR"


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


#: A :data:`MIN_NUMEL` this large means: only where a table routes to the DSL.
TABLE_ONLY = 1 << 62
#: Miss policy: inputs with fewer elements than this run ATen, per DSL (launch
#: overhead of a Python-launched kernel, several µs, dominates below 2**20
#: elements = 2 MiB in bf16). CuTeDSL's kernels serve only the buckets a table names
#: for them (their row-length constraints and 37 µs host cost per launch make a
#: miss no evidence of a win: ``benchmarks/results/h200/session7/cutedsl_smoke-runA.txt``).
#: Changing it takes effect at once (conds and router).
MIN_NUMEL: dict[str, int] = _Policy({"triton": 1 << 20, "helion": 1 << 20, "cutedsl": TABLE_ONLY})
FORMAT = 1

_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
#: The dtype names a table entry can name (:func:`dtype_name`).
DTYPE_NAMES = tuple(_DTYPE_NAMES.values())


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return _DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


def bucket(m: int, n: int) -> tuple[int, int]:
    """Shape bucket of ``[m, n]``: ``(next_pow2(n), next_pow2(m))``."""
    return 1 << max(n - 1, 0).bit_length(), 1 << max(m - 1, 0).bit_length()


def bucket_text(m: int, n: int) -> str:
    """The bucket of ``[m, n]`` as users write shapes, ``MxN``: ``"M<=4096 x N<=4096"``."""
    nb, mb = bucket(m, n)
    return f"M<={mb} x N<={nb}"


@dataclass(frozen=True)
class Choice:
    """One table entry: the winner for a bucket.

    Attributes:
        impl: ``"aten"``, ``"triton"``, ``"helion"`` or ``"cutedsl"``.
        config: the winning kernel config (``None``: the DSL's default).
        source: ``"user"`` (user cache) or ``"shipped"`` (package data).
        us: measured times per implementation, µs (evidence; may be empty).
    """

    impl: str
    config: Mapping[str, Any] | None = None
    source: str = "shipped"
    us: Mapping[str, float] = field(default_factory=dict)


def shipped_path(arch: str) -> Any:
    """The shipped table of ``arch`` (an ``importlib.resources`` traversable; may not exist)."""
    return resources.files("accel.kernels").joinpath("tuning", f"{arch}.json")


def user_table_path(arch: str) -> Path:
    """Where ``accel bench --tune`` writes the table of ``arch`` (``$ACCEL_TUNING_DIR/<arch>.json``)."""
    env = os.environ.get(TUNING_DIR_ENV, "").strip()
    if env:
        return Path(env) / f"{arch}.json"
    import platformdirs

    return Path(platformdirs.user_cache_dir("accel")) / "tuning" / f"{arch}.json"


#: The keys of a table file, and of one entry (``configs`` and ``us`` are the tuner's evidence; ``gbs`` and
#: ``evidence`` the shipped tables', from ``ci/gpu/table_from_bench.py``; ``source`` says where a table came from).
FILE_KEYS = ("format", "arch", "source", "entries")
ENTRY_KEYS = ("op", "dtype", "m", "n", "impl", "config", "configs", "us", "gbs", "evidence")
_REQUIRED = ("op", "dtype", "m", "n", "impl")
#: An arch name as a table file is named after it (``sm_90``, ``gfx942``, ``cpu``): no path separators.
_ARCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", re.ASCII)


def _entries(text: str, where: str) -> list[dict[str, Any]]:
    """The checked entries of a table file's text (:func:`check_entries`).

    Raises:
        TuningTableError: not JSON, not a format-1 table, a key it does not know, or a bad entry.
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise TuningTableError(f"accel.kernels tuning table {where}: not JSON ({exc}). Delete it or re-run "
                               f"accel bench --tune.") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
        raise TuningTableError(f"accel.kernels tuning table {where}: not a format-{FORMAT} table "
                               f"(keys {sorted(data) if isinstance(data, dict) else type(data).__name__}). "
                               f"Delete it or re-run accel bench --tune.")
    check_keys(data, FILE_KEYS, what=f"accel.kernels tuning table {where}", error=TuningTableError,
               fix="Fix the key, or delete the file and re-run accel bench --tune.")
    check_entries(data["entries"], where)
    return data["entries"]


def _entry_problem(e: object) -> str | None:
    """What is wrong with one table entry, or ``None``."""
    if not isinstance(e, Mapping):
        return f"is {type(e).__name__}, not a dict"
    unknown = [k for k in e if k not in ENTRY_KEYS]
    if unknown:
        return "has unknown key(s) " + ", ".join(
            f"{k!r}" + (f" (closest: {', '.join(repr(c) for c in closest(k, ENTRY_KEYS))})" if closest(k, ENTRY_KEYS)
                        else "") for k in unknown) + f"; valid keys: {', '.join(ENTRY_KEYS)}"
    missing = [k for k in _REQUIRED if k not in e]
    if missing:
        return f"lacks {', '.join(missing)}"
    for key, valid in (("impl", IMPLS), ("op", OPS), ("dtype", DTYPE_NAMES)):
        if valid and e[key] not in valid:  # OPS is empty until the op families are declared
            return f"has {key} {e[key]!r}, not one of {tuple(valid)}.{did_you_mean(e[key], valid)}"
    if not all(type(e[k]) is int and e[k] >= 1 for k in ("m", "n")):
        return f"has m or n that is not an integer >= 1 (m={e['m']!r}, n={e['n']!r})"
    for key in ("config", "configs", "us", "gbs"):
        value = e.get(key)
        if value is not None and (not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value)):
            return f"has {key}={value!r:.60}, not a dict with str keys (or null)"
    for key, unit in (("us", "times (µs)"), ("gbs", "bandwidths (GB/s)")):
        values = e.get(key) or {}
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values.values()):
            return f"has {key}={values!r:.60}: {unit} must be numbers"
    return None


def check_entries(entries: Iterable[object], where: str = "entries", tail: str = "") -> None:
    """Refuse table entries accel cannot use, naming the first bad one and what is wrong with it.

    Each entry is a dict of :data:`ENTRY_KEYS` with ``op`` (a declared kernel op), ``dtype``
    (:data:`DTYPE_NAMES`), ``m`` and ``n`` (ints >= 1) and ``impl`` (:data:`IMPLS`); ``config``,
    ``configs``, ``us``, ``gbs`` (dicts) and ``evidence`` are optional. A misspelt key or value is named with
    the closest valid ones.

    Raises:
        TuningTableError: (a ``KernelRegistrationError``, a ``ValueError``) the first bad entry.
    """
    for i, e in enumerate(entries):
        bad = _entry_problem(e)
        if bad is not None:
            raise TuningTableError(
                f"accel.kernels tuning table {where}: entry {i} {bad}{' ' if bad.endswith('?') else '. '}Entries need op, dtype, m, n and impl (e.g. "
                f"op='layer_norm_bwd', dtype='bfloat16', m=4096, n=4096, impl='triton'); the other keys are "
                f"optional{tail}.")


def _fold(into: dict, entries: Iterable[Mapping[str, Any]], source: str) -> None:
    """Fold checked entries (:func:`check_entries`) into ``into``."""
    for e in entries:
        impl = e.get("impl")
        key = (e["op"], e["dtype"], *bucket(int(e["m"]), int(e["n"])))
        into[key] = Choice(impl, e.get("config") or None, source, dict(e.get("us") or {}))


@functools.cache
def table(arch: str) -> dict[tuple[str, str, int, int], Choice]:
    """The folded table of ``arch``: shipped entries, then the user cache's over them.

    Keys are ``(op, dtype name, n_bucket, m_bucket)``. Read once per arch
    (:func:`reload` forgets it). A corrupt user file is ignored with a warning.
    """
    import warnings

    out: dict[tuple[str, str, int, int], Choice] = {}
    shipped = shipped_path(arch)
    if shipped.is_file():
        _fold(out, _entries(shipped.read_text(), str(shipped)), "shipped")
    user = user_table_path(arch)
    if user.is_file():
        staged: dict[tuple[str, str, int, int], Choice] = {}
        try:
            _fold(staged, _entries(user.read_text(), str(user)), "user")
        except Exception as exc:  # noqa: BLE001 - any malformed user file (entries not dicts, bad numbers, ...)
            from accel.errors import KernelFallbackWarning

            warnings.warn(f"accel.kernels: user tuning table {user} unreadable ({type(exc).__name__}: {exc}). "
                          f"Ignored as a whole: shipped defaults apply. Delete it or re-run accel bench --tune.",
                          KernelFallbackWarning, stacklevel=2)
        else:
            out.update(staged)
    forget_floors()  # a table loaded after the floors were computed may hold smaller buckets
    return out


def check_file(path: str | os.PathLike) -> None:
    """Check a tuning-table file as accel reads it (for ``accel doctor`` and your own checks).

    Raises:
        TuningTableError: the file is not a format-1 table, or has a key or entry accel cannot use
            (the message names it and the closest valid names).
        OSError: the file cannot be read.
    """
    p = Path(path)
    _entries(p.read_text(), str(p))


def reload() -> None:
    """Forget the folded tables and floors (the next :func:`lookup` re-reads the files).

    :func:`accel.clear_cache` calls it (the folded tables are a detection cache of :mod:`accel._caches`:
    ``ACCEL_TUNING_DIR`` and the files may have changed); forgetting the floors bumps :data:`GENERATION`,
    which drops every kernel override's memoised cond answers too.
    """
    _TABLE.cache_clear()  # the cache itself: tests may replace the module's name ``table`` with a stand-in
    forget_floors()


_TABLE = _caches.register(table, clear=reload)


def lookup(op: str, arch: str, dtype: str, m: int, n: int) -> Choice | None:
    """The entry for ``[m, n]`` of ``op`` on ``arch`` in ``dtype``, or ``None`` (a miss). One dict lookup."""
    t = table(arch)
    if not t:
        return None
    return t.get((op, dtype, *bucket(m, n)))


def declare_ops(*names: str) -> None:
    """Add kernel op names (``"rms_norm_fwd"``) that table entries may name; repeated names are kept once."""
    for name in names:
        if name not in OPS:
            OPS.append(name)


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


def takes(op: str, dsl: str, arch: str, dtype: str, m: int, n: int) -> bool:
    """Whether ``dsl``'s kernel should take ``[m, n]``: :func:`route` without the sentence (the per-call form)."""
    t = table(arch)
    hit = t.get((op, dtype, 1 << max(n - 1, 0).bit_length(), 1 << max(m - 1, 0).bit_length())) if t else None
    if hit is not None and hit.impl != dsl:
        hit = _named(hit, op, dtype, n)
    if hit is None:
        return m * n >= MIN_NUMEL.get(dsl, 0)
    return hit.impl == dsl


def floor(op: str, dsl: str) -> int:
    """Fewest elements ``dsl``'s kernel of ``op`` may take on any arch: below it :func:`takes` is false.

    ``min(MIN_NUMEL[dsl], smallest input of any table bucket naming dsl)`` over every
    shipped and user table on disk, so a cond can reject small inputs with one
    ``numel()`` before it looks at anything else (the 8-element call costs almost
    nothing over the router itself). Cached; :func:`reload` forgets it.
    """
    least = _FLOORS.get((op, dsl))
    if least is None:
        least = 1 << 62
        for arch in _table_archs():
            for (e_op, _dtype, n_b, m_b), choice in table(arch).items():
                if e_op == op and choice.impl == dsl:  # the bucket holds m > m_b/2, n > n_b/2
                    least = min(least, max(1, m_b // 2) * max(1, n_b // 2))
        _FLOORS[(op, dsl)] = least
    policy = MIN_NUMEL.get(dsl, 0)
    return least if least < policy else policy


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


def route(op: str, dsl: str, arch: str, dtype: str, m: int, n: int) -> str | None:
    """Whether ``dsl``'s kernel should take ``[m, n]``: ``None`` (yes) or the reason it should not.

    Hit: yes iff the entry names ``dsl``. Miss: yes iff ``m * n >= MIN_NUMEL[dsl]``. An entry naming
    another DSL whose kernels cannot take rows of ``n`` (:data:`PARTIAL_DSLS`) counts as a miss.
    """
    hit = lookup(op, arch, dtype, m, n)
    if hit is not None and hit.impl != dsl:
        hit = _named(hit, op, dtype, n)
    if hit is None:
        if MIN_NUMEL.get(dsl, 0) >= TABLE_ONLY:
            return (f"no tuning-table entry for {op} {dtype} bucket {bucket_text(m, n)} on {arch}: {dsl} kernels run "
                    f"only where a table routes them (tuning.MIN_NUMEL[{dsl!r}] is 2**62; accel bench --tune "
                    f"measures a table for this GPU)")
        if m * n < MIN_NUMEL.get(dsl, 0):
            return (f"{m * n} elements < tuning.MIN_NUMEL[{dsl!r}]={MIN_NUMEL.get(dsl, 0)} and no table entry "
                    f"(ATen is faster)")
        return None
    if hit.impl == dsl:
        return None
    return f"the {hit.source} tuning table for {arch} picks {hit.impl} for {op} {dtype} bucket {bucket_text(m, n)}"


def config(op: str, dsl: str, arch: str, dtype: str, m: int, n: int) -> Mapping[str, Any] | None:
    """The tuned config of ``dsl``'s kernel for ``[m, n]``, or ``None`` (use the kernel's default)."""
    hit = lookup(op, arch, dtype, m, n)
    return hit.config if hit is not None and hit.impl == dsl else None


def write_user_table(arch: str, entries: Iterable[Mapping[str, Any]], *, path: Path | None = None) -> Path:
    """Merge ``entries`` into the user table of ``arch`` and write it atomically, under a file lock.

    Entries with the same ``(op, dtype, bucket)`` as an existing one replace it.
    Safe under concurrent writers: the read-merge-write runs under
    ``filelock.FileLock(<path>.lock)`` and the new file replaces the old with
    ``os.replace`` (readers see the old or the new file, never a torn one).

    Args:
        arch: ``"sm_90"`` etc.
        entries: dicts with ``op``, ``dtype``, ``m``, ``n``, ``impl`` and optionally ``config``, ``us``.
        path: the file (default :func:`user_table_path`).

    Returns:
        The path written.

    Raises:
        TuningTableError: (a ``KernelRegistrationError``) ``arch`` is not an arch name (it names the
            file: ``sm_90``, ``gfx942``), ``entries`` is not a list of entry dicts, or an entry has a
            key it does not know, misses one, or names an unknown op, dtype or impl (the message names the
            closest valid ones); nothing was written.
    """
    from filelock import FileLock

    if not isinstance(arch, str) or not _ARCH.fullmatch(arch):
        raise TuningTableError(f"accel.kernels.write_user_table: arch={arch!r:.60} is not an arch name (ASCII "
                               "letters, digits, '_', '.', '+', '-'; it names the table file). Pass e.g. 'sm_90'.")
    if isinstance(entries, (Mapping, str, bytes)) or not isinstance(entries, Iterable):
        raise TuningTableError(f"accel.kernels.write_user_table: entries is {type(entries).__name__}, not a list of "
                               "entry dicts. Pass [dict(op=..., dtype=..., m=..., n=..., impl=...), ...].")
    new = list(entries)
    check_entries(new, f"write_user_table({arch!r})", "; nothing was written")
    new = [dict(e) for e in new]
    path = Path(path) if path is not None else user_table_path(arch)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        merged: dict[tuple, dict] = {}
        if path.is_file():
            try:
                for e in _entries(path.read_text(), str(path)):
                    merged[(e["op"], e["dtype"], *bucket(int(e["m"]), int(e["n"])))] = e
            except (ValueError, KeyError, TypeError, OSError):
                merged = {}  # a corrupt file is replaced (TuningTableError is a ValueError)
        for e in new:
            merged[(e["op"], e["dtype"], *bucket(int(e["m"]), int(e["n"])))] = e
        data = {"format": FORMAT, "arch": arch, "entries": list(merged.values())}
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, path)
        except BaseException:
            _unlink(tmp)
            raise
    reload()
    return path


def _unlink(path: str) -> None:
    """Remove a leftover temporary file (ignoring one that is already gone)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
