"""Build a shipped tuning table (kernels/tuning/<arch>.json) from ``accel bench`` JSON reports.

    python ci/gpu/table_from_bench.py OLDER.json ... NEWEST.json > kernels/tuning/sm_90.json

Per (op, direction, dtype, shape) row, each implementation's GB/s is its best over the
reports (the machine is noisy and noise only slows a row down: a stall, a clock ramp);
the winner is the fastest of ATen, Triton and Helion, with Triton preferred when within
3 % of Helion (its host cost per call is about half of Helion's: 24 vs 53 µs on the
H200's host, ``benchmarks/results/h200/launch_cost.md``). If the routed call in the
NEWEST report ran the winner and was still slower than ATen there, the winner is ATen:
the router's host cost is part of what a user pays. Every entry keeps the GB/s as evidence.
"""

from __future__ import annotations

import json
import sys

_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def build(reports: list[dict]) -> dict:
    newest = reports[-1]
    best: dict[tuple, dict[str, float]] = {}
    for report in reports:
        for row in report["rows"]:
            key = (row["op"], row["direction"], row["dtype"], tuple(row["shape"]))
            into = best.setdefault(key, {})
            for k in ("aten", "triton", "helion"):
                g = row["impls"].get(k, {}).get("gbs")
                if g:
                    into[k] = max(into.get(k, 0.0), g)
    entries = []
    for row in newest["rows"]:
        key = (row["op"], row["direction"], row["dtype"], tuple(row["shape"]))
        gbs = best.get(key, {})
        if "aten" not in gbs:
            continue
        winner = max(gbs, key=gbs.get)
        if winner == "helion" and gbs.get("triton", 0) >= 0.97 * gbs["helion"]:
            winner = "triton"
        note = f"fastest measured directly: {winner} (best of {len(reports)} runs)"
        routed = row["impls"].get("routed", {}).get("gbs")
        routed_to = row.get("routed_to", "")
        routed_dsl = routed_to.rpartition(".")[2] if "." in routed_to else None
        aten_now = row["impls"]["aten"].get("gbs")
        if winner == routed_dsl and routed is not None and aten_now and routed < aten_now:
            note = f"{winner} fastest directly ({gbs[winner]:.0f} GB/s) but routed {routed:.0f} < ATen: host-bound"
            winner = "aten"
        m, n = row["shape"]
        entries.append({"op": f"{row['op']}_{row['direction']}", "dtype": _DTYPES[row["dtype"]], "m": m, "n": n,
                        "impl": winner, "config": None, "gbs": {k: round(v) for k, v in gbs.items()},
                        "evidence": note})
    return {"format": 1, "arch": newest["arch"],
            "source": f"accel bench on {newest['device']}, torch {newest['torch']}, versions {newest['versions']}; "
                      f"copy ceiling {newest['copy_ceiling_gbs']:.0f} GB/s; {len(reports)} runs "
                      f"(ci/gpu/table_from_bench.py)",
            "entries": entries}


if __name__ == "__main__":
    print(json.dumps(build([json.load(open(p)) for p in sys.argv[1:]]), indent=1))
