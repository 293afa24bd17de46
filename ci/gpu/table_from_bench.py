"""Build a shipped tuning table (kernels/tuning/<arch>.json) from an ``accel bench`` JSON report.

    python ci/gpu/table_from_bench.py benchmarks/results/h200/kernels-*.json > kernels/tuning/sm_90.json

Per (op, direction, dtype, shape) row the winner is the fastest of ATen, Triton and Helion
measured directly; if the routed call (accel's router in front of the kernel the table picked
at the time) was slower than ATen in that run, the winner is ATen, since the router's host cost
is part of what a user pays. Every entry keeps the measured GB/s as evidence.
"""

from __future__ import annotations

import json
import sys

_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def build(report: dict) -> dict:
    entries = []
    for row in report["rows"]:
        impls = row["impls"]
        gbs = {k: impls[k]["gbs"] for k in ("aten", "triton", "helion") if k in impls and impls[k].get("gbs")}
        if "aten" not in gbs:
            continue
        winner = max(gbs, key=gbs.get)
        routed = impls.get("routed", {}).get("gbs")
        # which DSL the routed call ran in that run ("?" for backward rows: a miss routed to Triton, listed first)
        routed_dsl = row.get("routed_to", "?").rpartition(".")[2] if "." in row.get("routed_to", "") else "triton"
        note = f"fastest measured directly: {winner}"
        if winner == routed_dsl and routed is not None and routed < gbs["aten"]:
            note = f"{winner} fastest directly ({gbs[winner]:.0f} GB/s) but routed {routed:.0f} < ATen: host-bound"
            winner = "aten"
        m, n = row["shape"]
        entries.append({"op": f"{row['op']}_{row['direction']}", "dtype": _DTYPES[row["dtype"]], "m": m, "n": n,
                        "impl": winner, "config": None, "gbs": {k: round(v) for k, v in gbs.items()},
                        "evidence": note})
    return {"format": 1, "arch": report["arch"],
            "source": f"accel bench on {report['device']}, torch {report['torch']}, versions {report['versions']}; "
                      f"copy ceiling {report['copy_ceiling_gbs']:.0f} GB/s (ci/gpu/table_from_bench.py)",
            "entries": entries}


if __name__ == "__main__":
    print(json.dumps(build(json.load(open(sys.argv[1]))), indent=1))
