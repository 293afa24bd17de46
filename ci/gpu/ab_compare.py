"""Compare `accel bench` JSON reports of an old and a new commit (the ``ab`` stage of ``ci/gpu.sh``).

Usage: ``python ci/gpu/ab_compare.py DIR [--json OUT]``: DIR holds ``old-*/kernels-*.json`` and
``new-*/kernels-*.json`` (one report per process, each the median of its ``--rounds``). Per row (op, dtype,
shape, direction) and implementation: the median over the reports of each side, new/old time, and the old
side's own spread ((max - min) / median over its reports). A row passes when ``|new/old - 1|`` is within
the larger of 3 % and that spread. The router's cost over the bare ``torch.library`` floor is compared too.
Exit status 0 when every routed row and the router pass, else 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

TOLERANCE = 0.03


def _reports(root: Path, side: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.glob(f"{side}-*/kernels-*.json"))]


def _times(reports: list[dict]) -> dict[tuple, list[float]]:
    out: dict[tuple, list[float]] = {}
    for r in reports:
        for row in r["rows"]:
            for impl, v in row["impls"].items():
                out.setdefault((row["op"], row["dtype"], f"{row['shape'][0]}x{row['shape'][1]}", row["direction"],
                                impl), []).append(v["us"])
    return out


def _own_part(reports: list[dict]) -> list[float]:
    return [r["router_overhead"]["router_cost_us"] - r["router_overhead"]["bare_router_cost_us"]
            for r in reports if r.get("router_overhead", {}).get("bare_router_cost_us") is not None]


def compare(root: Path) -> dict:
    old, new = _reports(root, "old"), _reports(root, "new")
    if not old or not new:
        raise SystemExit(f"ab_compare: need old-*/ and new-*/ reports under {root} (found {len(old)} old, {len(new)} new)")
    t_old, t_new = _times(old), _times(new)
    rows = []
    for key in sorted(set(t_old) & set(t_new)):
        o, n = statistics.median(t_old[key]), statistics.median(t_new[key])
        spread = (max(t_old[key]) - min(t_old[key])) / o if len(t_old[key]) > 1 else 0.0
        allowed = max(TOLERANCE, spread)
        rows.append({"row": key, "old_us": o, "new_us": n, "ratio": n / o, "old_spread": spread,
                     "allowed": allowed, "ok": abs(n / o - 1) <= allowed})
    own_old, own_new = _own_part(old), _own_part(new)
    router = {"old_own_us": statistics.median(own_old) if own_old else None,
              "new_own_us": statistics.median(own_new) if own_new else None}
    # "does not grow": the new median within the old side's spread of its own part, or below it
    if own_old and own_new:
        router["ok"] = router["new_own_us"] <= max(own_old) + 0.05
    return {"old_reports": len(old), "new_reports": len(new), "rows": rows, "router": router}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    result = compare(a.dir)
    print(f"old reports {result['old_reports']}, new reports {result['new_reports']}\n")
    print("| op | dtype | shape | dir | impl | old µs | new µs | new/old | old spread | ok |")
    print("|---|---|---|---|---|---:|---:|---:|---:|---|")
    for r in result["rows"]:
        op, dtype, shape, d, impl = r["row"]
        print(f"| {op} | {dtype} | {shape} | {d} | {impl} | {r['old_us']:.1f} | {r['new_us']:.1f} | {r['ratio']:.3f} | "
              f"{100 * r['old_spread']:.1f} % | {'yes' if r['ok'] else 'NO'} |")
    rt = result["router"]
    print(f"\nrouter's own part over the bare torch.library router: old {rt['old_own_us']} µs, new {rt['new_own_us']} µs, "
          f"ok {rt.get('ok')}")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    routed_ok = all(r["ok"] for r in result["rows"] if r["row"][4] == "routed")
    return 0 if routed_ok and rt.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
