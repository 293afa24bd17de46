"""Build a shipped tuning table (kernels/tuning/<arch>.json) from ``accel bench`` JSON reports.

    python ci/gpu/table_from_bench.py [--tuned TUNE.json ...] [--evidence DSL[.OP_DIR]:N ...] OLDER.json ... NEWEST.json \
        > kernels/tuning/sm_90.json

Per (op, direction, dtype, shape) row, each implementation's GB/s is its best over the
reports (the machine is noisy and noise only slows a row down: a stall, a clock ramp).
Rules, in order:

1. the winner is the fastest of ATen and the DSL kernels (:data:`DSLS`);
2. a DSL kernel must beat ATen by at least :data:`MARGIN` (10 %), else ATen: a routed
   call pays the router and a Python launch on the host (``launch_cost.md``), which a
   few percent of GPU time does not buy back;
3. on host-sensitive shapes (at most :data:`SMALL` elements, e.g. 4096x4096 and 65536x1024:
   kernels of ~16-130 µs) Triton beats Helion and CuTeDSL whenever Triton itself passes rule 2: its host
   cost per call is about half of Helion's (24 vs 53 µs on the H200's host, ``launch_cost.md``); CuTeDSL's
   was 37 µs per launch against ATen's 12.5 through CuTeDSL's executor (session 7 run A), 6-9 µs through
   TVM-FFI (session 8) - unless a report in that DSL's
   evidence window (``--evidence``) measured the routed call running it on that row faster than
   Triton's best direct call;
4. if, in ANY report, the routed call ran the winner and was slower than ATen there, the winner
   is the other DSL if it passes rule 2 and a report measured its routed call not losing to ATen
   (and none losing), else ATen (host-bound there: the router's host cost is part of what a user pays) - on shapes
   above :data:`SMALL` only where the winner called directly beat ATen in that same report: a big
   row whose direct call lost too saw the GPU slowed (every implementation and peer of the row
   dropped together: session 3 run C2, RMSNorm 32768x4096), which says nothing about the routed
   path; on host-sensitive shapes the direct call is host-bound as well, so any loss counts.

Every entry keeps the GB/s as evidence. With ``--tuned``, a table written by
``accel bench --tune`` supplies the kernel config of each entry, for the same benchmark shape
``[M, N]`` (the last file naming it wins): its best config of the entry's winner (``configs``),
or its ``config`` where the tune picked the same implementation. ``--evidence DSL:N``: only the newest ``N`` reports supply rule
4's evidence for ``DSL`` (when its host path changed between runs, older routed numbers measured
other code); ``--evidence DSL.OP_DIR:N`` (``triton.layer_norm_bwd:16``) sets the window of one op and
direction, over the DSL's (its host path did not change with the rest).
"""

from __future__ import annotations

import json
import sys

#: The DSLs whose kernels a table entry may name (as :data:`accel.kernels.tuning.table.IMPLS`, without ATen).
DSLS = ("triton", "helion", "cutedsl")
#: A DSL kernel must be this much faster than ATen to be routed to.
MARGIN = 1.10
#: Elements at or below which host cost decides between the DSLs: 65536x1024 bf16 moves 256 MB,
#: ~67 µs at the copy ceiling, no more than a routed Helion call's host time on the H200's host
#: (71-126 µs, ``launch_cost.md``); session 2's run 5 measured routed Helion there at 0.65x ATen.
SMALL = 65536 * 1024

_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def _key(row: dict) -> tuple:
    return row["op"], row["direction"], row["dtype"], tuple(row["shape"])


def build(reports: list[dict], tuned: dict | None = None, evidence: dict[str, int] | None = None) -> dict:
    newest = reports[-1]
    evidence = evidence or {}
    best: dict[tuple, dict[str, float]] = {}
    host_bound: dict[tuple, set[str]] = {}
    routed_other: dict[tuple, float] = {}  # best routed GB/s with a DSL other than Triton behind it, in its window
    routed_held: dict[tuple, set[str]] = {}  # DSLs whose routed call ran and did not lose to ATen there
    for age, report in enumerate(reversed(reports)):  # age 0: the newest
        for row in report["rows"]:
            into = best.setdefault(_key(row), {})
            for k in ("aten", *DSLS):
                g = row["impls"].get(k, {}).get("gbs")
                if g:
                    into[k] = max(into.get(k, 0.0), g)
            routed = row["impls"].get("routed", {}).get("gbs")
            aten = row["impls"].get("aten", {}).get("gbs")
            routed_to = row.get("routed_to", "")
            ran = next((d for d in DSLS if routed_to.rpartition(".")[2].startswith(d)), None)
            if routed and ran not in (None, "triton") and age < evidence.get(ran, len(reports)):
                routed_other[_key(row), ran] = max(routed_other.get((_key(row), ran), 0.0), routed)
            if routed and aten and routed < aten and "." not in routed_to and routed_to != "aten":
                print(f"note: {report.get('started', '?')} {_key(row)}: routed {routed:.0f} < ATen {aten:.0f} "
                      f"GB/s but the report does not say what it ran ({routed_to!r}); rule 4 cannot use it",
                      file=sys.stderr)
            if routed and aten and "." in routed_to:
                tail = routed_to.rpartition(".")[2]  # "<op>_<dir>.<dsl><suffix>" (install(suffix=...))
                dsl = next((d for d in DSLS if tail.startswith(d)), tail)
                direct = row["impls"].get(dsl, {}).get("gbs")
                m, n = row["shape"]
                window = evidence.get(f"{dsl}.{row['op']}_{row['direction']}", evidence.get(dsl, len(reports)))
                if age >= window:
                    continue
                if routed >= aten:
                    routed_held.setdefault(_key(row), set()).add(dsl)
                elif m * n <= SMALL or (direct and direct > aten):
                    host_bound.setdefault(_key(row), set()).add(dsl)
    entries = []
    for row in newest["rows"]:
        key = _key(row)
        gbs = best.get(key, {})
        if "aten" not in gbs:
            continue
        m, n = row["shape"]
        winner = max(gbs, key=gbs.get)
        note = f"fastest measured directly: {winner} (best of {len(reports)} runs)"
        if winner != "aten" and gbs[winner] < MARGIN * gbs["aten"]:
            note = f"{winner} only {gbs[winner] / gbs['aten']:.2f}x ATen (< {MARGIN}x): ATen"
            winner = "aten"
        if winner not in ("aten", "triton") and m * n <= SMALL and gbs.get("triton", 0) >= MARGIN * gbs["aten"]:
            if routed_other.get((key, winner), 0.0) > gbs["triton"]:
                note = (f"fastest measured directly: {winner}; host-sensitive shape, but its routed call measured "
                        f"{routed_other[key, winner]:.0f} GB/s > triton's best {gbs['triton']:.0f}")
            else:
                note = (f"{winner} fastest ({gbs[winner]:.0f} GB/s) but host-sensitive shape: "
                        f"triton ({gbs['triton']:.0f})")
                winner = "triton"
        if winner in host_bound.get(key, ()):
            lost = winner
            note = f"{lost} fastest directly ({gbs[lost]:.0f} GB/s) but its routed call lost to ATen: host-bound"
            winner = "aten"
            for other in sorted((d for d in DSLS if d != lost), key=lambda d: -gbs.get(d, 0.0)):
                if (gbs.get(other, 0.0) >= MARGIN * gbs["aten"] and other not in host_bound.get(key, ())
                        and other in routed_held.get(key, ())):
                    note += f"; {other} ({gbs[other]:.0f} GB/s) routed never lost: {other}"
                    winner = other
                    break
        config = None
        for t in reversed((tuned or {}).get("entries", [])):  # the last tune file naming the shape wins
            if (t["op"], t["dtype"], t["m"], t["n"]) != (f"{row['op']}_{row['direction']}", _DTYPES[row["dtype"]], m, n):
                continue
            per_dsl = t.get("configs") or {}  # every DSL's best config (tune files of session 3 on)
            if winner in per_dsl or t["impl"] == winner:
                config = per_dsl.get(winner, t.get("config"))
                note += f"; config from accel bench --tune ({t.get('us', {}).get(winner, 0):.1f} us)"
                break
        entries.append({"op": f"{row['op']}_{row['direction']}", "dtype": _DTYPES[row["dtype"]], "m": m, "n": n,
                        "impl": winner, "config": config, "gbs": {k: round(v) for k, v in gbs.items()},
                        "evidence": note})
    return {"format": 1, "arch": newest["arch"],
            "source": f"accel bench on {newest['device']}, torch {newest['torch']}, versions {newest['versions']}; "
                      f"copy ceiling {newest['copy_ceiling_gbs']:.0f} GB/s; {len(reports)} runs "
                      f"(ci/gpu/table_from_bench.py)",
            "entries": entries}


if __name__ == "__main__":
    args = sys.argv[1:]
    tuned: dict = {"entries": []}
    evidence: dict[str, int] = {}
    while args[:1] in (["--tuned"], ["--evidence"]):  # repeatable
        if args[0] == "--tuned":  # one tune file per op family / tuning run, oldest first
            tuned["entries"] += json.load(open(args[1]))["entries"]
        else:
            dsl, _, count = args[1].partition(":")
            evidence[dsl] = int(count)
        args = args[2:]
    print(json.dumps(build([json.load(open(p)) for p in args], tuned, evidence), indent=1))
