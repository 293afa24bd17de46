"""Two-process all-reduce through accel.distributed, one GPU per process; checks the sum.

Each rank r fills a float32 tensor of ``--numel`` elements with ``r + 1`` on its own
device and all-reduces it (sum); every element must equal ``world * (world + 1) / 2``.
The c10d backend and ``device_id`` come from :func:`accel.distributed.init_process_group`.

NVLink multicast (NVLS) stays off: ``NCCL_NVLS_ENABLE=0`` is set before any rank starts.

Run either way (two GPUs)::

    python ci/gpu/allreduce.py                     # spawns 2 processes itself
    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 ci/gpu/allreduce.py --torchrun

Exit status 0 when every rank saw the right sum; prints one line per rank and a JSON summary.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time

os.environ["NCCL_NVLS_ENABLE"] = "0"  # before torch / NCCL read it

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def _run(rank: int, world: int, numel: int, out_dir: str | None) -> dict:
    import accel.distributed as ad

    os.environ.setdefault("LOCAL_RANK", str(rank))
    device = ad.init_process_group(rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        t = torch.full((numel,), float(rank + 1), device=device)
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        if device.type != "cpu":
            torch.accelerator.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        want = world * (world + 1) / 2
        ok = bool((t == want).all().item())
        result = {"rank": rank, "device": str(device), "backend": dist.get_backend(), "numel": numel,
                  "expected": want, "min": t.min().item(), "max": t.max().item(), "ok": ok, "first_call_ms": ms,
                  "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE")}
        print(json.dumps(result), flush=True)
        if out_dir:
            with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
                json.dump(result, f)
        return result
    finally:
        dist.destroy_process_group()


def _spawned(rank: int, world: int, numel: int, out_dir: str) -> None:
    os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["LOCAL_RANK"] = str(rank), str(world), str(rank)
    _run(rank, world, numel, out_dir)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--torchrun", action="store_true", help="launched by torchrun (read RANK/WORLD_SIZE)")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--numel", type=int, default=1 << 24, help="elements per rank (float32; default 64 MiB)")
    ap.add_argument("--out", default=None, help="directory for rank*.json and allreduce.json")
    args = ap.parse_args(argv)
    if args.torchrun:
        r = _run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args.numel, args.out)
        return 0 if r["ok"] else 1
    out = args.out or os.path.join("/tmp", f"accel-allreduce-{os.getpid()}")
    os.makedirs(out, exist_ok=True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    ctx = mp.start_processes(_spawned, args=(args.world, args.numel, out), nprocs=args.world, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + 300
    while not ctx.join(timeout=2):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            print("allreduce: ranks did not finish within 300 s", file=sys.stderr)
            return 1
    results = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(args.world)]
    ok = all(r["ok"] for r in results)
    summary = {"ok": ok, "world": args.world, "backend": results[0]["backend"], "ranks": results}
    with open(os.path.join(out, "allreduce.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(f"allreduce over {summary['backend']} on {args.world} ranks: {'OK' if ok else 'WRONG SUM'} "
          f"(expected {results[0]['expected']}, results in {out})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
