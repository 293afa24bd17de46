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
subprocess cannot start (``ci/gpu/helion_autotune_probe.py`` reproduces each cause).
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from accel import _caches
from accel._options import check_keys, closest, did_you_mean
from accel.errors import TuningTableError

__all__ = ["Choice", "DEFAULT_KEYS", "Default", "ENTRY_KEYS", "FILE_KEYS", "IMPLS", "MIN_NUMEL", "MIN_ROUNDS",
           "MIN_SPEEDUP", "TUNING_DIR_ENV", "arch_state", "bucket", "check_defaults", "check_entries", "check_file",
           "config", "defaults", "dtype_name", "dtype_short", "floor", "lookup", "miss_floor", "reload", "route",
           "shipped_path", "table", "takes", "unmeasured", "user_table_path", "write_user_table"]

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


#: A floor this large means: only where a table entry routes to the DSL.
TABLE_ONLY = 1 << 62
#: Per-DSL overrides of every arch's declared miss floor (:func:`defaults`), for this process: a DSL named
#: here takes misses of at least this many elements on every arch, whatever the tables declare. Only
#: CuTeDSL is named by default, with :data:`TABLE_ONLY`: its kernels serve only the buckets a table names
#: for them (their row-length constraints and 37 µs host cost per launch make a miss no evidence of a win:
#: ``benchmarks/results/h200/session7/cutedsl_smoke-runA.txt``). Tests and diagnostic scripts set
#: ``MIN_NUMEL["triton"] = 0`` to route tiny interpreter shapes. Changing it takes effect at once (conds
#: and router). Triton's and Helion's floors are the tables' (the 2**20 floor measured on sm_90 is the
#: ``sm_90`` table's declared default, ``kernels/tuning/sm_90.json``).
MIN_NUMEL: dict[str, int] = _Policy({"cutedsl": TABLE_ONLY})
#: What an entry that routes to a kernel must show (``accel bench --tune`` writes no other): the median of
#: at least :data:`MIN_ROUNDS` rounds, and at least :data:`MIN_SPEEDUP` times ATen's speed in them.
MIN_ROUNDS = 3
MIN_SPEEDUP = 1.05
FORMAT = 1

_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
#: The dtype names a table entry can name (:func:`dtype_name`).
DTYPE_NAMES = tuple(_DTYPE_NAMES.values())


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return _DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


def dtype_short(dtype: str) -> str:
    """``"float16"`` -> ``"fp16"``, ``"bfloat16"`` -> ``"bf16"``, ``"float32"`` -> ``"fp32"`` (as users say them)."""
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(dtype, dtype)


def bucket(m: int, n: int) -> tuple[int, int]:
    """Shape bucket of ``[m, n]``: ``(next_pow2(n), next_pow2(m))``."""
    return 1 << max(n - 1, 0).bit_length(), 1 << max(m - 1, 0).bit_length()


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
FILE_KEYS = ("format", "arch", "source", "entries", "defaults", "sources")
ENTRY_KEYS = ("op", "dtype", "m", "n", "impl", "config", "configs", "us", "gbs", "evidence", "rounds")
#: The keys of one declared default (``defaults`` of a table file): ``op``, ``dtype``, ``impl`` (a DSL),
#: ``min_numel`` (elements) and ``source`` (where the number comes from) are required.
DEFAULT_KEYS = ("op", "dtype", "impl", "min_numel", "source", "evidence")
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
    check_defaults(data.get("defaults") or [], where)
    return data["entries"]


def _file_defaults(text: str) -> list[dict[str, Any]]:
    """The ``defaults`` of a table file's text already checked by :func:`_entries`."""
    return list(json.loads(text).get("defaults") or [])


def _source_text(text: str, source: str) -> str:
    """A default's ``source``: the file's ``sources[source]`` where it names one (shared texts), else itself."""
    sources = json.loads(text).get("sources") or {}
    return str(sources.get(source, source)) if isinstance(sources, Mapping) else source


def _default_problem(d: object) -> str | None:
    """What is wrong with one declared default, or ``None``."""
    if not isinstance(d, Mapping):
        return f"is {type(d).__name__}, not a dict"
    unknown = [k for k in d if k not in DEFAULT_KEYS]
    if unknown:
        return (f"has unknown key(s) {', '.join(repr(k) for k in unknown)}"
                f"{did_you_mean(unknown[0], DEFAULT_KEYS)} Valid keys: {', '.join(DEFAULT_KEYS)}")
    missing = [k for k in DEFAULT_KEYS[:5] if k not in d]
    if missing:
        return f"lacks {', '.join(missing)}"
    for key, valid in (("impl", IMPLS[1:]), ("op", OPS), ("dtype", DTYPE_NAMES)):
        if valid and d[key] not in valid:
            return f"has {key} {d[key]!r}, not one of {tuple(valid)}.{did_you_mean(d[key], valid)}"
    if type(d["min_numel"]) is not int or d["min_numel"] < 0:
        return f"has min_numel={d['min_numel']!r}, not an integer >= 0 (elements)"
    if not isinstance(d["source"], str) or not d["source"].strip():
        return "has an empty source: say where the floor was measured (file, run, GPU)"
    return None


def check_defaults(defaults: Iterable[object], where: str = "defaults", tail: str = "") -> None:
    """Refuse declared defaults accel cannot use, naming the first bad one and what is wrong with it.

    Each is a dict of :data:`DEFAULT_KEYS`: ``op`` (a declared kernel op), ``dtype`` (:data:`DTYPE_NAMES`),
    ``impl`` (a DSL, not ``"aten"``: a miss without a default already runs ATen), ``min_numel`` (int
    elements, ``>= 0``) and ``source`` (non-empty: where the number was measured); ``evidence`` optional.

    Raises:
        TuningTableError: (a ``ValueError``) the first bad default.
    """
    if isinstance(defaults, (Mapping, str, bytes)) or not isinstance(defaults, Iterable):
        raise TuningTableError(f"accel.kernels tuning table {where}: defaults is {type(defaults).__name__}, not a "
                               f"list of dicts{tail}.")
    _refuse_first(defaults, _default_problem, lambda i, bad: (
        f"accel.kernels tuning table {where}: default {i} {_stop(bad)} A default needs op, dtype, impl, "
        f"min_numel and source (e.g. op='rms_norm_fwd', dtype='bfloat16', impl='triton', "
        f"min_numel=1048576, source='accel bench on NVIDIA H200, ...'){tail}."))


def _stop(words: str) -> str:
    """``words`` ending a sentence: a problem that ends in its own ``?`` or ``.`` gets no second stop."""
    return words if words.endswith(("?", ".")) else words + "."


def _refuse_first(items: Iterable[object], problem: Callable[[object], str | None],
                  message: Callable[[int, str], str]) -> None:
    """Raise :class:`~accel.errors.TuningTableError` with ``message(i, what)`` for the first of ``items`` that
    ``problem`` finds something wrong with (``what``: its words); return where it finds nothing."""
    for i, item in enumerate(items):
        bad = problem(item)
        if bad is not None:
            raise TuningTableError(message(i, bad))


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
    _refuse_first(entries, _entry_problem, lambda i, bad: (
        f"accel.kernels tuning table {where}: entry {i} {_stop(bad)} Entries need op, "
        f"dtype, m, n and impl (e.g. op='layer_norm_bwd', dtype='bfloat16', m=4096, n=4096, impl='triton'); the "
        f"other keys are optional{tail}."))


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
        _fold(out, _entries(shipped.read_text(), str(shipped)), "shipped", arch)
    user = user_table_path(arch)
    if user.is_file():
        staged: dict[tuple[str, str, int, int], Choice] = {}
        try:
            _fold(staged, _entries(user.read_text(), str(user)), "user", arch)
        except Exception as exc:  # noqa: BLE001 - any malformed user file (entries not dicts, bad numbers, ...)
            from accel.errors import KernelFallbackWarning

            warnings.warn(f"accel.kernels: user tuning table {user} unreadable ({type(exc).__name__}: {exc}). "
                          f"Ignored as a whole: shipped defaults apply. Delete it or re-run accel bench --tune.",
                          KernelFallbackWarning, stacklevel=2)
        else:
            out.update(staged)
    forget_floors()  # a table loaded after the floors were computed may hold smaller buckets
    return out


@functools.cache
def defaults(arch: str) -> dict[tuple[str, str, str], Default]:
    """The declared defaults of ``arch``: ``(op, dtype name, impl) -> Default``, the user file's over the
    shipped file's (empty for an arch without a table: there nothing takes a miss).

    Read once per arch (:func:`reload` forgets it). A corrupt user file is ignored (:func:`table` warns).

    Example:
        >>> from accel.kernels.tuning import table
        >>> table.defaults("sm_90")[("rms_norm_fwd", "bfloat16", "triton")].min_numel
        1048576
        >>> table.defaults("gfx942")
        {}
    """
    out: dict[tuple[str, str, str], Default] = {}
    for path, source in ((shipped_path(arch), "shipped"), (user_table_path(arch), "user")):
        if not path.is_file():
            continue
        try:
            text = path.read_text()
            _entries(text, str(path))
            found = _file_defaults(text)
        except Exception:  # noqa: BLE001 - a malformed user file: table() warns and ignores it as a whole
            if source == "shipped":
                raise
            continue
        for d in found:
            out[(d["op"], d["dtype"], d["impl"])] = Default(int(d["min_numel"]), source,
                                                            _source_text(text, str(d["source"])))
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
    ``os.replace`` (readers see the old or the new file, never a torn one).

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
            key it does not know, misses one, or names an unknown op, dtype or impl (the message names the
            closest valid ones); nothing was written.

    Warns:
        KernelFallbackWarning: the existing file was unreadable; it was moved aside to
            ``<name>.unreadable-<time>`` (named in the message) before the new table was written.
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
    new_defaults = [] if defaults is None else list(defaults)
    check_defaults(new_defaults, f"write_user_table({arch!r})", "; nothing was written")
    path = Path(path) if path is not None else user_table_path(arch)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        merged: dict[tuple, dict] = {}
        merged_defaults: dict[tuple, dict] = {}
        if path.is_file():
            try:
                text = path.read_text()
                for e in _entries(text, str(path)):
                    merged[(e["op"], e["dtype"], *bucket(int(e["m"]), int(e["n"])))] = e
                for d in _file_defaults(text):
                    merged_defaults[(d["op"], d["dtype"], d["impl"])] = d
            except (ValueError, KeyError, TypeError, OSError) as exc:  # TuningTableError is a ValueError
                merged, merged_defaults = {}, {}
                _set_aside(path, exc)
        for e in new:
            merged[(e["op"], e["dtype"], *bucket(int(e["m"]), int(e["n"])))] = e
        for d in new_defaults:
            merged_defaults[(d["op"], d["dtype"], d["impl"])] = dict(d)
        data: dict[str, Any] = {"format": FORMAT, "arch": arch, "entries": list(merged.values())}
        if merged_defaults:
            data["defaults"] = list(merged_defaults.values())
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


def _set_aside(path: Path, exc: BaseException) -> None:
    """Move an unreadable user table out of the way (``<name>.unreadable-<time>``) before a new one replaces it,
    and say where: its entries may be a hand edit away from valid, so they are never dropped silently."""
    import time
    import warnings

    from accel.errors import KernelFallbackWarning

    aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
    os.replace(path, aside)
    warnings.warn(f"accel.kernels.write_user_table: the user tuning table {path} was unreadable "
                  f"({type(exc).__name__}: {str(exc)[:300]}); it is kept as {aside} and a new table holds only the "
                  f"entries written now. Fix that file and merge it back, or delete it.", KernelFallbackWarning,
                  stacklevel=3)


def _unlink(path: str) -> None:
    """Remove a leftover temporary file (ignoring one that is already gone)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
