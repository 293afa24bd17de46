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
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from accel import _caches
from accel.errors import KernelRegistrationError

__all__ = ["Choice", "IMPLS", "MIN_NUMEL", "TUNING_DIR_ENV", "bucket", "dtype_name", "floor", "lookup", "reload",
           "config", "route", "takes", "shipped_path", "table", "user_table_path", "write_user_table"]

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


def _entries(text: str, where: str) -> list[dict[str, Any]]:
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
        raise KernelRegistrationError(f"accel.kernels tuning table {where}: not a format-{FORMAT} table "
                                      f"(keys {sorted(data) if isinstance(data, dict) else type(data).__name__}). "
                                      f"Delete it or re-run accel bench --tune.")
    return data["entries"]


def _fold(into: dict, entries: Iterable[Mapping[str, Any]], source: str) -> None:
    for e in entries:
        impl = e.get("impl")
        if impl not in IMPLS:
            continue
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
        KernelRegistrationError: an entry misses a key or names an unknown impl (nothing written).
    """
    from filelock import FileLock

    new = [dict(e) for e in entries]
    for e in new:
        missing = [k for k in ("op", "dtype", "m", "n", "impl") if k not in e]
        bad = (f"lacks {', '.join(missing)}" if missing else
               f"has impl {e['impl']!r}, not one of {IMPLS}" if e["impl"] not in IMPLS else
               f"has op {e['op']!r}, not one of {OPS}" if e["op"] not in OPS else
               f"has dtype {e['dtype']!r}, not one of {DTYPE_NAMES}" if e["dtype"] not in DTYPE_NAMES else
               "has m or n that is not an integer >= 1" if not all(
                   type(e[k]) is int and e[k] >= 1 for k in ("m", "n")) else None)
        if bad is not None:
            raise KernelRegistrationError(
                f"accel.kernels.write_user_table: entry {e} {bad}. Entries need op, dtype, m, n and impl "
                f"(e.g. op='layer_norm_bwd', dtype='bfloat16', m=4096, n=4096, impl='triton'); nothing was written.")
    path = Path(path) if path is not None else user_table_path(arch)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        merged: dict[tuple, dict] = {}
        if path.is_file():
            try:
                for e in _entries(path.read_text(), str(path)):
                    merged[(e["op"], e["dtype"], *bucket(int(e["m"]), int(e["n"])))] = e
            except (ValueError, KeyError, TypeError):
                merged = {}  # a corrupt file is replaced
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
