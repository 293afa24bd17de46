"""Time every candidate config of one op and shape beside ATen and the peers, in interleaved rounds.

The tuner (``accel bench --tune``) times each config once, one after another, so a drift of the GPU's
clocks or of the host over the run can order two configs 1 % apart either way. This probe times ATen,
every candidate config of each DSL (the op's ``accel.kernels.ops.<op>.bench.tune_candidates``) and the peers (Liger-Kernel and
quack, where the benchmark has them for the op) once per round, in the same order, for ``--rounds``
rounds, and reports per candidate the median over rounds of its ``triton.testing.do_bench`` median (µs),
its ratio to the best peer in each round, and in how many rounds it beat that peer.

Usage (on a CUDA GPU): ``python3 ci/gpu/config_probe.py --family rms_norm --direction fwd --shape 32768x4096
[--dtype bf16] [--rounds 5] [--dsl triton] [--json out.json] [--table tune.json]``, or
``python3 ci/gpu/config_probe.py --convert out.json sm_90`` (a recorded result as a tune file, on stdout).

``--table`` writes the result as a tune file (the format ``accel bench --tune`` writes: per entry ``impl``,
``config``, ``configs`` with each DSL's fastest config, ``us``), which ``ci/gpu/table_from_bench.py --tuned``
reads for the configs of the shipped table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch
from triton.testing import do_bench

from accel.kernels.bench.arguments import DTYPES
from accel.kernels.catalog import families
from accel.kernels.tuning.table import dtype_name


def _peers(family: str, direction: str, x) -> dict:
    """name -> callable for the peers the benchmark times for this op (the op's
    ``accel.kernels.ops.<op>.bench``: its ``peers()`` and the candidates of its ``cases``, on inputs of
    ``x``'s shape, dtype and device)."""
    bench = families()[family].bench_module()
    found = bench.peers()
    case = bench.cases(*x.shape, x.dtype, x.device, found)[direction]
    return {k: v for k, v in case.candidates.items() if k in found}


def tune_file(result: dict, arch: str) -> dict:
    """A probe's result (its ``--json``) as a tune file of ``arch``: the fastest of ATen and the DSLs as ``impl``,
    each DSL's fastest config in ``configs``, the medians in ``us``."""
    best: dict[str, dict] = {}
    for r in sorted(result["rows"], key=lambda r: r["us"]):
        impl, _, cfg = r["name"].partition(" ")
        if impl != "peer" and impl not in best:
            best[impl] = {"us": r["us"], "config": json.loads(cfg) if cfg else None}
    winner = min(best, key=lambda k: best[k]["us"])
    entry = {"op": f"{result['family']}_{result['direction']}", "dtype": dtype_name(DTYPES[result["dtype"]]),
             "m": result["m"], "n": result["n"], "impl": winner, "config": best[winner]["config"],
             "configs": {k: v["config"] for k, v in best.items() if k != "aten"},
             "us": {k: round(v["us"], 2) for k, v in best.items()}}
    return {"format": 1, "arch": arch, "entries": [entry]}


def main() -> int:
    if sys.argv[1:2] == ["--convert"]:  # --convert RESULT.json ARCH: a recorded probe result as a tune file
        print(json.dumps(tune_file(json.load(open(sys.argv[2])), sys.argv[3]), indent=1))
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", default="rms_norm", choices=("rms_norm", "softmax", "layer_norm"))
    p.add_argument("--direction", default="fwd", choices=("fwd", "bwd"))
    p.add_argument("--shape", default="32768x4096")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--dsl", default="", help="comma-separated DSLs to probe (default: every one the tuner has)")
    p.add_argument("--json", default="")
    p.add_argument("--table", default="", help="also write the fastest config per DSL as a tune file")
    a = p.parse_args()
    m, n = map(int, a.shape.split("x"))
    dtype, device = DTYPES[a.dtype], torch.device("cuda")
    aten, cands = families()[a.family].bench_module().tune_candidates(a.direction, dtype, m, n, device)
    torch.manual_seed(1)
    x = torch.randn(m, n, dtype=dtype, device=device)
    runs = {"aten": aten, **{f"peer {k}": v for k, v in _peers(a.family, a.direction, x).items()}}
    wanted = set(filter(None, a.dsl.split(",")))
    for dsl, (launch, configs) in cands.items():
        if wanted and dsl not in wanted:
            continue
        for cfg in configs:
            runs[f"{dsl} {json.dumps(cfg, sort_keys=True)}"] = (lambda launch=launch, cfg=cfg: launch(cfg))
    times: dict[str, list[float | None]] = {k: [] for k in runs}  # per round; None: that run failed
    for r in range(a.rounds):
        for name, fn in runs.items():
            try:
                times[name].append(float(do_bench(fn, warmup=10, rep=60, return_mode="median")) * 1e3)
            except Exception as exc:  # noqa: BLE001 - a config that does not launch is reported, not fatal
                times[name].append(None)
                print(f"round {r} {name}: {type(exc).__name__}: {exc}"[:300], flush=True)
        print(f"round {r + 1}/{a.rounds} done", flush=True)
    peers = [k for k in runs if k.startswith("peer ")]
    best_peer = [min((times[k][i] for k in peers if times[k][i] is not None), default=None) for i in range(a.rounds)]
    rows = []
    for name, ts in times.items():
        done = [t for t in ts if t is not None]
        if not done:
            continue
        ratios = [bp / t for bp, t in zip(best_peer, ts) if bp is not None and t is not None]
        rows.append({"name": name, "us": statistics.median(done), "rounds_us": ts,
                     "x_best_peer": statistics.median(ratios) if ratios else None,
                     "rounds_won": sum(q > 1.0 for q in ratios), "rounds_compared": len(ratios)})
    rows.sort(key=lambda r: r["us"])
    moved = (2 if a.direction == "fwd" else 3) * m * n * x.element_size()
    print(f"{a.family} {a.direction} {a.dtype} {m}x{n}: median of {a.rounds} rounds (do_bench medians)")
    for r in rows:
        peer = (f"{r['x_best_peer']:.3f}x best peer, won {r['rounds_won']}/{r['rounds_compared']}"
                if r["x_best_peer"] else "")
        print(f"  {r['us']:8.1f} us {moved / r['us'] / 1e3:6.0f} GB/s  {peer:32s} {r['name']}")
    result = {"family": a.family, "direction": a.direction, "dtype": a.dtype, "m": m, "n": n, "rounds": a.rounds,
              "rows": rows, "torch": torch.__version__}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    if a.table:
        from accel.kernels.ops.conds import arch

        with open(a.table, "w") as f:
            json.dump(tune_file(result, arch(device)), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
