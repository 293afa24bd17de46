"""Compile accel's built-in Triton kernels ahead of time for every GPU target and record what the compilers
report: registers, spills, scratch / local memory, LDS / shared memory and the widest global load per
(kernel, config, target). CPU only: nothing is launched (:mod:`accel.kernels.dsl.triton_aot`).

    python benchmarks/aot_targets.py                      # the full matrix -> benchmarks/results/aot/
    python benchmarks/aot_targets.py --set ci --targets gfx942,sm_90 --kernels rms_norm
    python benchmarks/aot_targets.py --set sample --json /tmp/aot.json --no-write

``--set full`` (default): the CI set in bf16 and fp32 plus, in bf16, every tuner candidate config at the
swept row lengths (``_SWEPT`` in ``kernels/ops/triton_aot_cases.py``); ``ci``: the shipped tables' configs
plus one default per row-length class, bf16 (what ``tests/kernels/test_aot_targets.py`` asserts where
``ACCEL_TEST_ONCE=1``); ``sample``: one case per kernel function (the per-env test). The script re-runs itself without ``TRITON_INTERPRET`` when that is
set. Exit status 1 when a default or shipped config fails :func:`~accel.kernels.dsl.triton_aot.check`
outside :data:`~accel.kernels.dsl.triton_aot.EXCLUSIONS` (a failing tuner candidate is reported, not an
error: the tuner times it, and it loses where it spills).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "aot"


def sample(cases: list) -> list:
    """One case per kernel function (and per signature: the linear cross-entropy's two target kinds): the
    first the CI set has for it, a shipped table's config where there is one, else the default of the first
    row-length class."""
    first: dict = {}
    for c in cases:
        first.setdefault((c.name, tuple(c.signature.items())), c)
    return list(first.values())


def build(which: str, kernels: list[str] | None) -> list:
    from accel.kernels.ops import triton_aot_cases

    if which == "full":
        return triton_aot_cases.cases(kernels, full=True)
    cases = triton_aot_cases.cases(kernels)
    return sample(cases) if which == "sample" else cases


def is_candidate(report: dict) -> bool:
    """Whether a report is of a tuner candidate (not a default nor a shipped table's config)."""
    return report["source"].startswith("candidate")


def markdown(reports: list[dict], meta: dict) -> str:
    """The reports as a markdown table, a summary line per target first."""
    lines = [f"# AOT compile check: {meta['set']} set", "",
             f"triton {meta['triton']}, torch {meta['torch']}, {meta['cases']} cases x {len(meta['targets'])} targets = "
             f"{len(reports)} compiles in {meta['seconds']:.0f} s ({meta['jobs']} jobs, {meta['host']}). "
             "regs: NVIDIA registers per thread (ptxas), AMD VGPRs per lane (arch + acc); spills: NVIDIA spill "
             "bytes (stores + loads), AMD VGPR + SGPR spill count; scratch: stack / local / private bytes per "
             "thread; shared: shared memory / LDS per block, bytes; load: widest global load, bytes (want: what "
             "the config lets each thread hold of an aligned row, 0 = none asserted).", "",
             "A tuner candidate (source `candidate`) that fails is a finding, not a failure: `accel bench --tune` "
             "times it and it loses where it spills; it is listed as `candidate:`.", "",
             "| target | compiles | pass | excluded (known) | candidate fails | fail | regs min-max | widest load 16 B |",
             "|---|---:|---:|---:|---:|---:|---|---:|"]
    for t in meta["targets"]:
        rs = [r for r in reports if r["target"] == t]
        ok = [r for r in rs if not r["problems"]]
        ex = [r for r in rs if r["problems"] and r["excluded"]]
        cand = [r for r in rs if r["problems"] and not r["excluded"] and is_candidate(r)]
        regs = [r["regs"] for r in rs if not r["error"]]
        wide = sum(1 for r in rs if r["load_bytes"] >= 16)
        lines.append(f"| {t} | {len(rs)} | {len(ok)} | {len(ex)} | {len(cand)} | "
                     f"{len(rs) - len(ok) - len(ex) - len(cand)} | {min(regs, default=0)}-{max(regs, default=0)} | "
                     f"{wide} |")
    kernels = list(dict.fromkeys(r["kernel"] for r in reports))
    lines += ["", "Per kernel and target: registers min-max over its configs, the widest global load (bytes) of the "
              "configs where 16 B is possible, and how many configs spill (their exclusion named below).", "",
              "| kernel | " + " | ".join(meta["targets"]) + " |", "|---|" + "---|" * len(meta["targets"])]
    for k in kernels:
        cells = []
        for t in meta["targets"]:
            rs = [r for r in reports if r["kernel"] == k and r["target"] == t and not r["error"]]
            if not rs:
                cells.append("-")
                continue
            regs = [r["regs"] for r in rs]
            vec = [r["load_bytes"] for r in rs if r["vector_bytes"]]
            spill = sum(1 for r in rs if r["spills"] or r["scratch"])
            cell = f"{min(regs)}-{max(regs)}" + (f" / {min(vec)} B" if vec else "")
            cells.append(cell + (f" / {spill} spill" if spill else ""))
        lines.append(f"| `{k}` | " + " | ".join(cells) + " |")
    lines += ["", "| kernel (constexprs, warps) | source | target | regs | spills | scratch | shared | load (want) | "
              "result |", "|---|---|---|---:|---:|---:|---:|---|---|"]
    for r in reports:
        if not r["problems"]:
            result = "ok"
        else:
            tag = ("excluded (" + r["excluded"].split(":")[0] + ")" if r["excluded"]
                   else "candidate" if is_candidate(r) else "FAIL")
            result = f"{tag}: " + "; ".join(r["problems"])
        lines.append(f"| `{r['label']}` | {r['source']} | {r['target']} | {r['regs']} | {r['spills']} | "
                     f"{r['scratch']} | {r['shared']} | {r['load_bytes']} ({r['vector_bytes']}) | "
                     f"{result.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def write(doc: dict, out: Path) -> Path:
    """``doc`` as ``aot-<set>-triton<version>.json`` and ``.md`` under ``out``; returns the stem's path."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"aot-{doc['meta']['set']}-triton{doc['meta']['triton']}"
    # one report per line: the file stays diffable without indenting every field
    body = ",\n".join(json.dumps(r, separators=(",", ":")) for r in doc["reports"])
    (out / f"{stem}.json").write_text(f'{{"meta": {json.dumps(doc["meta"])},\n"reports": [\n{body}\n]}}\n')
    (out / f"{stem}.md").write_text(markdown(doc["reports"], doc["meta"]))
    return out / stem


def merge(paths: list[str], out: Path) -> int:
    """Merge the ``--json`` outputs of runs split by ``--kernels`` (same set, triton and targets) into one."""
    docs = [json.loads(Path(p).read_text()) for p in paths]
    meta = dict(docs[0]["meta"])
    for key in ("set", "triton", "targets"):
        if any(d["meta"][key] != meta[key] for d in docs):
            print(f"merge: the runs differ in {key}", file=sys.stderr)
            return 2
    meta["cases"] = sum(d["meta"]["cases"] for d in docs)
    meta["seconds"] = round(sum(d["meta"]["seconds"] for d in docs), 1)
    meta["kernels"] = [k for d in docs for k in (d["meta"]["kernels"] if isinstance(d["meta"]["kernels"], list)
                                                 else [d["meta"]["kernels"]])]
    doc = {"meta": meta, "reports": [r for d in docs for r in d["reports"]]}
    print(f"wrote {write(doc, out)}.md and .json", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=("full", "ci", "sample"), default="full")
    ap.add_argument("--targets", help="comma-separated accel arch names (default: all)")
    ap.add_argument("--kernels", help="comma-separated op families (default: all)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--json", help="also write the reports as JSON to this path")
    ap.add_argument("--out", default=str(RESULTS), help="results folder (default benchmarks/results/aot)")
    ap.add_argument("--no-write", action="store_true", help="write nothing under --out")
    ap.add_argument("--quiet", action="store_true", help="no per-compile progress lines")
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="compile nothing: merge these --json outputs (runs "
                    "split by --kernels) into one table under --out")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, Path(args.out))

    if os.environ.get("TRITON_INTERPRET", "").strip() == "1" or os.environ.get("TRITON_ALWAYS_COMPILE") != "1":
        from accel.kernels.dsl.triton_aot import clean_env

        return subprocess.call([sys.executable, __file__, *(sys.argv[1:] if argv is None else argv)], env=clean_env())

    import torch
    import triton

    from accel.kernels.dsl import triton_aot

    targets = args.targets.split(",") if args.targets else list(triton_aot.TARGETS)
    unknown = [t for t in targets if t not in triton_aot.TARGETS]
    if unknown:
        ap.error(f"unknown targets {unknown}; known: {', '.join(triton_aot.TARGETS)}")
    skipped = {}
    for backend in ("cuda", "hip"):
        ok, why = triton_aot.family_support(backend)
        if not ok:
            skipped.update({t: why for t in targets if triton_aot.TARGETS[t].backend == backend})
    for t, why in skipped.items():
        print(f"skip {t}: {why}", file=sys.stderr)
    targets = [t for t in targets if t not in skipped]
    try:
        cases = build(args.set, args.kernels.split(",") if args.kernels else None)
    except ValueError as exc:
        ap.error(str(exc))
    total = len(cases) * len(targets)
    print(f"{len(cases)} cases x {len(targets)} targets = {total} compiles, {args.jobs} jobs", file=sys.stderr)
    start = time.perf_counter()

    def progress(done: int, n: int, r) -> None:
        if args.quiet:
            return
        state = "ok" if not r.problems else ("excluded" if r.excluded else "FAIL " + "; ".join(r.problems))
        print(f"[{done}/{n}] {r.target:8} {r.label} regs={r.regs} spills={r.spills} scratch={r.scratch} "
              f"shared={r.shared} load={r.load_bytes}/{r.vector_bytes} {r.seconds:.1f}s {state}", file=sys.stderr,
              flush=True)

    reports = [r.as_dict() for r in triton_aot.run_cases(cases, targets, jobs=args.jobs, progress=progress)]
    seconds = time.perf_counter() - start
    meta = {"set": args.set, "triton": triton.__version__, "torch": torch.__version__, "targets": targets,
            "skipped": skipped, "cases": len(cases), "jobs": args.jobs, "seconds": round(seconds, 1),
            "host": f"{platform.machine()}, {os.cpu_count()} cores",
            "kernels": args.kernels.split(",") if args.kernels else "all"}
    doc = {"meta": meta, "reports": reports}
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))
    if not args.no_write:
        print(f"wrote {write(doc, Path(args.out))}.md and .json", file=sys.stderr)
    failed = [r for r in reports if r["problems"] and not r["excluded"] and not is_candidate(r)]
    cand = sum(1 for r in reports if r["problems"] and not r["excluded"] and is_candidate(r))
    print(f"{total} compiles in {seconds:.0f} s: {total - len(failed) - cand} pass or known-excluded, {cand} tuner "
          f"candidates fail (findings), {len(failed)} fail", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
