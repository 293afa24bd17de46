"""The tuning-table files: what one holds, the checks that refuse one, and the atomic writer.

A table file (shipped ``accel/kernels/tuning/<arch>.json`` or a user table written by ``accel bench --tune``)
is a JSON object. Its header says what the file was made for:

- ``format``: the schema version (:data:`FORMAT`); a file of another format is refused.
- ``arch``: the GPU architecture it was measured on (``"sm_90"``, ``"gfx942"``); it must be the arch the file
  is named for and read for.
- ``dsls``: each DSL the file names (an entry's or a default's ``impl`` other than ``"aten"``) -> the
  version of its distribution the numbers were measured with (``{"triton": "3.6.0"}``; ``null``: not
  installed when written). A user table fits this machine only where each named DSL's installed version is
  of the same release series (major.minor, :func:`dsl_series`): Triton, Helion and CuTeDSL change their code
  generation and the meaning of their configs between releases, so a winner measured with one release is no
  evidence for another. Shipped tables are accel's own, checked by its tests on every supported release:
  their ``dsls`` is a record, not a condition.
- ``accel``: the accel version that wrote the file, for people reading it. Never a condition: a table that
  fits by schema, arch and DSL keeps working after an accel upgrade.
- ``source`` / ``sources``: where the numbers come from (free text).

Then ``entries`` (one winner per op, dtype and shape bucket: :data:`ENTRY_KEYS`) and ``defaults`` (declared
miss floors: :data:`DEFAULT_KEYS`). :func:`parse` refuses a file accel cannot read (not JSON, another
schema, an unknown key, a malformed entry); :func:`misfit` says why a readable file does not fit this machine
or contradicts itself (another arch, a DSL version that is not installed here, an entry naming a kernel accel
does not have, two entries for one bucket that disagree, a winner slower than ATen by its own numbers).
:mod:`accel.kernels.tuning.table` reads the files through both and ignores a refused user table as a whole,
with one :class:`~accel.errors.TuningTableWarning`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from accel import _compat
from accel._options import check_keys, closest, did_you_mean
from accel.errors import TuningTableError

__all__ = ["DEFAULT_KEYS", "DSL_DISTRIBUTIONS", "DTYPE_NAMES", "ENTRY_KEYS", "FILE_KEYS", "FORMAT", "IMPLS",
           "MIN_ROUNDS", "MIN_SPEEDUP", "OPS", "TUNING_DIR_ENV", "bucket", "check_defaults", "check_entries",
           "check_file", "declare_ops", "dsl_series", "dtype_name", "installed_dsl_versions", "misfit", "parse",
           "shipped_path", "user_table_path", "write"]

#: The schema version of a table file this accel reads and writes.
FORMAT = 1
#: Implementations an entry may name.
IMPLS = ("aten", "triton", "helion", "cutedsl")
#: The kernel ops a table entry can name (op family and direction), declared by the op families
#: (:func:`declare_ops`; ``accel.kernels`` declares every built-in family when it is imported).
OPS: list[str] = []
#: Kernel op -> the DSLs accel has a kernel of it in (declared with the op: :func:`declare_ops`).
OP_DSLS: dict[str, tuple[str, ...]] = {}
#: Environment variable: directory of the user tables (default: platformdirs' user cache dir + ``/tuning``).
TUNING_DIR_ENV = "ACCEL_TUNING_DIR"
#: What an entry that routes to a kernel must show (``accel bench --tune`` writes no other): the median of
#: at least :data:`MIN_ROUNDS` rounds, and at least :data:`MIN_SPEEDUP` times ATen's speed in them.
MIN_ROUNDS = 3
MIN_SPEEDUP = 1.05
#: DSL -> the distributions that install it, first found wins (ROCm and XPU builds of torch bring their own
#: Triton: ``pytorch-triton-rocm``, ``pytorch-triton-xpu``; the same names as :func:`accel.diagnostics.dsl_versions`).
DSL_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "triton": ("triton", "pytorch-triton-rocm", "pytorch-triton-xpu"),
    "helion": ("helion",),
    "cutedsl": ("nvidia-cutlass-dsl",),
}

_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
#: The dtype names a table entry can name (:func:`dtype_name`).
DTYPE_NAMES = tuple(_DTYPE_NAMES.values())

#: The keys of a table file, and of one entry (``configs`` and ``us`` are the tuner's evidence; ``gbs`` and
#: ``evidence`` the shipped tables', from ``ci/gpu/table_from_bench.py``; ``source`` says where a table came from).
FILE_KEYS = ("format", "arch", "dsls", "accel", "source", "entries", "defaults", "sources")
ENTRY_KEYS = ("op", "dtype", "m", "n", "impl", "config", "configs", "us", "gbs", "evidence", "rounds")
#: The keys of one declared default (``defaults`` of a table file): ``op``, ``dtype``, ``impl`` (a DSL),
#: ``min_numel`` (elements) and ``source`` (where the number comes from) are required.
DEFAULT_KEYS = ("op", "dtype", "impl", "min_numel", "source", "evidence")
_REQUIRED = ("op", "dtype", "m", "n", "impl")
#: An arch name as a table file is named after it (``sm_90``, ``gfx942``, ``cpu``): no path separators.
ARCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*", re.ASCII)
_RETUNE = "Delete it or re-run accel bench --tune."


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return _DTYPE_NAMES.get(dtype) or str(dtype).removeprefix("torch.")


def bucket(m: int, n: int) -> tuple[int, int]:
    """Shape bucket of ``[m, n]``: ``(next_pow2(n), next_pow2(m))``."""
    return 1 << max(n - 1, 0).bit_length(), 1 << max(m - 1, 0).bit_length()


def declare_ops(*names: str, dsls: Iterable[str] = ()) -> None:
    """Add kernel op names (``"rms_norm_fwd"``) that table entries may name; repeated names are kept once.

    Args:
        names: the ops.
        dsls: the DSLs accel has a kernel of these ops in (an entry or default naming another DSL for them is
            refused); empty: not said (any DSL of :data:`IMPLS` is accepted).
    """
    for name in names:
        if name not in OPS:
            OPS.append(name)
        if dsls:
            OP_DSLS[name] = tuple(dict.fromkeys((*OP_DSLS.get(name, ()), *dsls)))


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


def installed_dsl_versions() -> dict[str, str | None]:
    """DSL -> its installed distribution's version (``None``: not installed), from package metadata only."""
    out: dict[str, str | None] = {}
    for dsl, dists in DSL_DISTRIBUTIONS.items():
        out[dsl] = next((v for v in map(_compat.module_version, dists) if v is not None), None)
    return out


def dsl_series(version: str | None) -> str | None:
    """The release series a table's DSL version must share with the installed one: ``"3.6.0+git1a2b"`` ->
    ``"3.6"`` (``None`` stays ``None``; a string that is no version number is its own series)."""
    if version is None:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        return ".".join(str(p) for p in Version(version).release[:2])
    except InvalidVersion:
        return version


# ------------------------------------------------------------------------------------------ reading a file


def parse(text: str, where: str) -> dict[str, Any]:
    """The table of a file's text, checked against the schema (:func:`check_entries`, :func:`check_defaults`).

    Raises:
        TuningTableError: not JSON, not a format-:data:`FORMAT` table, a key it does not know, or a bad entry,
            default or header value.
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise TuningTableError(f"accel.kernels tuning table {where}: not JSON ({exc}). {_RETUNE}") from None
    if isinstance(data, dict) and type(data.get("format")) is int and data["format"] > FORMAT:
        raise TuningTableError(f"accel.kernels tuning table {where}: format {data['format']}, written by a newer "
                               f"accel; this accel reads format {FORMAT}. Upgrade accel, or delete the file and "
                               f"re-run accel bench --tune with this one.")
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
        raise TuningTableError(f"accel.kernels tuning table {where}: not a format-{FORMAT} table "
                               f"(keys {sorted(data) if isinstance(data, dict) else type(data).__name__}). "
                               f"{_RETUNE}")
    check_keys(data, FILE_KEYS, what=f"accel.kernels tuning table {where}", error=TuningTableError,
               fix="Fix the key, or delete the file and re-run accel bench --tune.")
    dsls = data.get("dsls", {})
    if not isinstance(dsls, Mapping) or not all(k in IMPLS[1:] and (v is None or isinstance(v, str))
                                                for k, v in dsls.items()):
        raise TuningTableError(f"accel.kernels tuning table {where}: dsls={dsls!r:.80} is not a dict of DSL name "
                               f"({', '.join(IMPLS[1:])}) -> version string or null. {_RETUNE}")
    check_entries(data["entries"], where)
    check_defaults(data.get("defaults") or [], where)
    return data


def misfit(data: Mapping[str, Any], arch: str, *, shipped: bool = False,
           installed: Mapping[str, str | None] | None = None) -> str | None:
    """Why a parsed table (:func:`parse`) does not fit this machine or contradicts itself, or ``None``.

    Checked: the header's ``arch`` is ``arch`` (the arch the file is named for and read for); each DSL the
    file names is listed in ``dsls`` with a version of the installed release series (user tables only:
    ``shipped`` tables are accel's own); no two entries for one (op, dtype, bucket), nor two defaults for one
    (op, dtype, impl), disagree.

    Args:
        data: the parsed table.
        arch: the arch the file is read for.
        shipped: whether it is a table shipped inside the package.
        installed: DSL -> installed version (default :func:`installed_dsl_versions`).

    Returns:
        The reason, a clause without a final stop, or ``None``.
    """
    said = data.get("arch")
    if said is None:
        return (f"it does not say which arch it was measured on (no 'arch' key; it is read for {arch}); a table "
                f"written by accel bench --tune has one")
    if said != arch:
        return (f"it holds a table measured on {said!r}, read here for {arch} (the file's name): a winner measured "
                f"on one GPU architecture is no evidence for another; put it back as {said}.json on a {said} "
                f"machine, or run accel bench --tune on this GPU")
    problem = _inconsistency(data)
    if problem is not None or shipped:
        return problem
    named = sorted({str(x["impl"]) for x in (*data["entries"], *(data.get("defaults") or []))} - {"aten"})
    recorded = data.get("dsls") or {}
    here = installed_dsl_versions() if installed is None else installed
    for dsl in named:
        if dsl not in recorded:
            return (f"its entries name {dsl} but it does not say which {dsl} version measured them (no "
                    f"dsls[{dsl!r}]; tables written before accel recorded it); {dsl} {here.get(dsl) or 'is not'} "
                    f"installed here")
        if dsl_series(recorded[dsl]) != dsl_series(here.get(dsl)):
            then = f"{dsl} {recorded[dsl]}" if recorded[dsl] is not None else f"no {dsl} installed"
            now = f"{dsl} {here.get(dsl)} is installed here" if here.get(dsl) else f"{dsl} is not installed here"
            return (f"it was measured with {then}, and {now}: a {dsl} release can change which kernel and "
                    f"config win (the versions must share major.minor)")
    return None


def _inconsistency(data: Mapping[str, Any]) -> str | None:
    """Two entries for one bucket, or two defaults for one (op, dtype, impl), that disagree (a hand edit)."""
    seen: dict[tuple, tuple[int, Mapping[str, Any]]] = {}
    for i, e in enumerate(data["entries"]):
        key = (e["op"], e["dtype"], *bucket(e["m"], e["n"]))
        if key in seen:
            j, other = seen[key]
            if (other["impl"], other.get("config")) != (e["impl"], e.get("config")):
                return (f"entries {j} and {i} both give {e['op']} {e['dtype']} bucket M<={key[3]} x N<={key[2]} "
                        f"but disagree ({other['impl']} {other.get('config')} vs {e['impl']} {e.get('config')}): "
                        f"keep one")
        else:
            seen[key] = (i, e)
    floors: dict[tuple, tuple[int, int]] = {}
    for i, d in enumerate(data.get("defaults") or []):
        key = (d["op"], d["dtype"], d["impl"])
        if key in floors and floors[key][1] != d["min_numel"]:
            return (f"defaults {floors[key][0]} and {i} both declare the {d['impl']} floor of {d['op']} "
                    f"{d['dtype']} but disagree ({floors[key][1]} vs {d['min_numel']} elements): keep one")
        floors.setdefault(key, (i, d["min_numel"]))
    return None


def check_file(path: str | os.PathLike, arch: str | None = None) -> None:
    """Check a tuning-table file as accel reads it (for ``accel doctor`` and your own checks): the schema
    (:func:`parse`) and whether it fits this machine (:func:`misfit`; a file inside the package is judged as
    a shipped table).

    Args:
        path: the file.
        arch: the arch it is read for (default: its name without ``.json``).

    Raises:
        TuningTableError: the file is not a format-1 table, has a key or entry accel cannot use (the message
            names it and the closest valid names), or does not fit (the message says why).
        OSError: the file cannot be read.
    """
    p = Path(path)
    data = parse(p.read_text(), str(p))
    shipped = p.resolve().parent == Path(str(shipped_path("x"))).resolve().parent
    why = misfit(data, arch if arch is not None else p.name.removesuffix(".json"), shipped=shipped)
    if why is not None:
        raise TuningTableError(f"accel.kernels tuning table {p}: {why}. {_RETUNE}")


# ------------------------------------------------------------------------------- entries and defaults


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


def _kernel_problem(op: str, impl: str) -> str | None:
    """Where ``impl`` is a DSL that accel has no kernel of ``op`` in (as the op's family declared it)."""
    have = OP_DSLS.get(op)
    if impl == "aten" or not have or impl in have:
        return None
    return f"names {impl} for {op}, but accel has no {impl} kernel of {op} (its kernels: {', '.join(have)})"


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
    if type(d["min_numel"]) is not int or d["min_numel"] < 1:
        return (f"has min_numel={d['min_numel']!r}, not an integer >= 1 (elements; a floor that takes every miss "
                f"is tuning.MIN_NUMEL's job for one process, not a table's)")
    if not isinstance(d["source"], str) or not d["source"].strip():
        return "has an empty source: say where the floor was measured (file, run, GPU)"
    return _kernel_problem(d["op"], d["impl"])


def check_defaults(defaults: Iterable[object], where: str = "defaults", tail: str = "") -> None:
    """Refuse declared defaults accel cannot use, naming the first bad one and what is wrong with it.

    Each is a dict of :data:`DEFAULT_KEYS`: ``op`` (a declared kernel op), ``dtype`` (:data:`DTYPE_NAMES`),
    ``impl`` (a DSL accel has a kernel of ``op`` in, not ``"aten"``: a miss without a default already runs
    ATen), ``min_numel`` (int elements, ``>= 1``) and ``source`` (non-empty: where the number was measured);
    ``evidence`` optional.

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
    return _kernel_problem(e["op"], e["impl"]) or _evidence_problem(e)


def _evidence_problem(e: Mapping[str, Any]) -> str | None:
    """An entry whose winner is slower than ATen by its own numbers (``us``, ``gbs``): a hand edit of ``impl``
    (no tuner writes a kernel that lost to ATen)."""
    impl = e["impl"]
    us, gbs = e.get("us") or {}, e.get("gbs") or {}
    if impl == "aten":
        return None
    if impl in us and "aten" in us and us[impl] > us["aten"]:
        return (f"picks {impl}, but its own times say {impl} {us[impl]:g} µs against ATen's {us['aten']:g} µs "
                f"(a tuner picks a kernel only where it is faster)")
    if impl in gbs and "aten" in gbs and gbs[impl] < gbs["aten"]:
        return (f"picks {impl}, but its own bandwidths say {impl} {gbs[impl]:g} GB/s against ATen's "
                f"{gbs['aten']:g} GB/s (a tuner picks a kernel only where it is faster)")
    return None


def check_entries(entries: Iterable[object], where: str = "entries", tail: str = "") -> None:
    """Refuse table entries accel cannot use, naming the first bad one and what is wrong with it.

    Each entry is a dict of :data:`ENTRY_KEYS` with ``op`` (a declared kernel op), ``dtype``
    (:data:`DTYPE_NAMES`), ``m`` and ``n`` (ints >= 1) and ``impl`` (:data:`IMPLS`, a DSL only where accel has
    a kernel of ``op`` in it); ``config``, ``configs``, ``us``, ``gbs`` (dicts) and ``evidence`` are optional,
    and where ``us`` or ``gbs`` hold both the winner's and ATen's numbers, the winner's must not be the slower.
    A misspelt key or value is named with the closest valid ones.

    Raises:
        TuningTableError: (a ``KernelRegistrationError``, a ``ValueError``) the first bad entry.
    """
    _refuse_first(entries, _entry_problem, lambda i, bad: (
        f"accel.kernels tuning table {where}: entry {i} {_stop(bad)} Entries need op, "
        f"dtype, m, n and impl (e.g. op='layer_norm_bwd', dtype='bfloat16', m=4096, n=4096, impl='triton'); the "
        f"other keys are optional{tail}."))


# ------------------------------------------------------------------------------------------- writing


def write(arch: str, entries: Iterable[Mapping[str, Any]], *, path: Path | None = None,
          defaults: Iterable[Mapping[str, Any]] | None = None) -> Path:
    """Merge ``entries`` (and declared ``defaults``) into the user table of ``arch`` and write it atomically,
    under a file lock: :func:`accel.kernels.tuning.table.write_user_table` without forgetting the folded tables
    (it documents the arguments and errors).

    The header says what the file was made for: ``format``, ``arch``, ``dsls`` (the installed version of each
    DSL the merged file names) and ``accel`` (this version, for readers). An existing file that cannot be read,
    or that does not fit this machine (:func:`misfit`: its entries were measured with another DSL release), is
    moved aside with a warning and not merged.
    """
    from filelock import FileLock

    if not isinstance(arch, str) or not ARCH_NAME.fullmatch(arch):
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
    installed = installed_dsl_versions()
    with FileLock(str(path) + ".lock"):
        merged: dict[tuple, dict] = {}
        merged_defaults: dict[tuple, dict] = {}
        if path.is_file():
            try:
                old = parse(path.read_text(), str(path))
            except (ValueError, KeyError, TypeError, OSError) as exc:  # TuningTableError is a ValueError
                _set_aside(path, f"was unreadable ({type(exc).__name__}: {str(exc)[:300]})")
            else:
                why = misfit(old, arch, installed=installed)
                if why is not None:
                    _set_aside(path, f"does not fit this machine ({why})")
                else:
                    for e in old["entries"]:
                        merged[(e["op"], e["dtype"], *bucket(int(e["m"]), int(e["n"])))] = e
                    for d in old.get("defaults") or []:
                        merged_defaults[(d["op"], d["dtype"], d["impl"])] = d
        for e in new:
            merged[(e["op"], e["dtype"], *bucket(int(e["m"]), int(e["n"])))] = e
        for d in new_defaults:
            merged_defaults[(d["op"], d["dtype"], d["impl"])] = dict(d)
        named = sorted({x["impl"] for x in (*merged.values(), *merged_defaults.values())} - {"aten"})
        from accel._version import __version__

        data: dict[str, Any] = {"format": FORMAT, "arch": arch, "dsls": {d: installed.get(d) for d in named},
                                "accel": __version__, "entries": list(merged.values())}
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
    return path


def _set_aside(path: Path, why: str) -> None:
    """Move a user table that cannot be merged out of the way (``<name>.unreadable-<time>``) before a new one
    replaces it, and say where: its entries may be a hand edit away from valid, so they are never dropped
    silently."""
    import time
    import warnings

    from accel.errors import TuningTableWarning

    aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
    os.replace(path, aside)
    warnings.warn(f"accel.kernels.write_user_table: the user tuning table {path} {why}; it is kept as {aside} and "
                  f"a new table holds only the entries written now. Fix that file and merge it back, or delete "
                  f"it.", TuningTableWarning, stacklevel=4)


def _unlink(path: str) -> None:
    """Remove a leftover temporary file (ignoring one that is already gone)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
