"""Why does Helion's ``autotune_effort="quick"`` find "No working config" on the H200? A probe.

Runs one small Helion softmax kernel's autotuning in fresh subprocesses under
different Helion settings and prints, per setting, whether a config was found,
how long it took and the autotuner's last log lines. Usage (GPU machine)::

    python ci/gpu/helion_autotune_probe.py [--timeout 150]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import time

CHILD = textwrap.dedent('''
    import os, sys, time, torch, helion, helion.language as hl
    print("helion", helion.__version__, "torch", torch.__version__, "CUDA_VISIBLE_DEVICES",
          os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)

    @helion.kernel(autotune_effort="quick")
    def softmax(x: torch.Tensor) -> torch.Tensor:
        n, _m = x.size()
        out = torch.empty_like(x)
        for tile_n in hl.tile(n):
            out[tile_n, :] = torch.nn.functional.softmax(x[tile_n, :], dim=1)
        return out

    if __name__ == "__main__":
        x = torch.randn(4096, 4096, dtype=torch.bfloat16, device="cuda")
        t0 = time.time()
        try:
            y = softmax(x)
            torch.testing.assert_close(y, torch.softmax(x, -1), rtol=2e-2, atol=2e-2)
            print("RESULT ok", softmax.bind((x,))._config, f"{time.time()-t0:.1f}s", flush=True)
        except Exception as exc:
            print("RESULT failed", type(exc).__name__, str(exc)[:300], f"{time.time()-t0:.1f}s", flush=True)
''')

SETTINGS = {
    "defaults": {},
    "no benchmark subprocess": {"HELION_AUTOTUNE_BENCHMARK_SUBPROCESS": "0"},
    "no subprocess, no precompile": {"HELION_AUTOTUNE_BENCHMARK_SUBPROCESS": "0", "HELION_AUTOTUNE_PRECOMPILE": "0"},
    "spawn precompile": {"HELION_AUTOTUNE_PRECOMPILE": "spawn"},
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timeout", type=float, default=150.0)
    p.add_argument("--only", default=None, help="comma-separated setting names")
    args = p.parse_args()
    import tempfile

    d = tempfile.mkdtemp()
    path = os.path.join(d, "probe_kernel.py")
    with open(path, "w") as f:
        f.write(CHILD)
    for name, env in SETTINGS.items():
        if args.only and name not in args.only.split(","):
            continue
        e = {**os.environ, **env, "HELION_AUTOTUNE_LOG_LEVEL": "INFO", "HELION_AUTOTUNE_MAX_GENERATIONS": "1"}
        t0 = time.time()
        try:
            proc = subprocess.run([sys.executable, path], env=e, capture_output=True, text=True, timeout=args.timeout)
            out = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"").decode() + (exc.stderr or b"").decode() + "\nRESULT timeout"
        print(f"===== {name} {env} ({time.time() - t0:.0f} s)")
        lines = out.splitlines()
        print("\n".join(l[:400] for l in lines[:6]))
        print("  ...")
        print("\n".join(l[:400] for l in lines[-30:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
