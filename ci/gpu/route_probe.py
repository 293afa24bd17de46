"""Why each accel op routes or declines at the real-model benchmark's shapes, on this GPU.

Installs accel's kernels, then for every op the Hugging Face integration and the ATen overrides use, at
HF Llama's shapes (bf16, 4 x 2048 tokens, d 2048, GQA 16/8, FFN 5632, vocab 32000): ``accel.kernels.explain``
(which registration would run, and each one's verdict), the integration's ``accel_takes``, and the routed /
declined counts after one real call. Prints a report; ``--json PATH`` writes it too.

Usage (the device tool, from ci/gpu/h200.sh's install): ``python3 ci/gpu/route_probe.py --json $OUT/route_probe.json``
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

import torch


def _cases(device: torch.device) -> list[tuple[str, tuple]]:
    bf = dict(dtype=torch.bfloat16, device=device)
    x, w = torch.randn(4, 2048, 2048, **bf), torch.ones(2048, **bf)
    gate = torch.randn(4, 2048, 5632, **bf)
    q, k = torch.randn(4, 16, 2048, 128, **bf), torch.randn(4, 8, 2048, 128, **bf)
    cos, sin = torch.randn(4, 2048, 128, **bf), torch.randn(4, 2048, 128, **bf)
    h, head = torch.randn(8192, 2048, **bf), torch.randn(32000, 2048, **bf) / 45
    target = torch.randint(0, 32000, (8192,), device=device)
    lce = (h, head, target, None, None, "mean", -100, 0.0, 1024, "compact", torch.bfloat16, False, True, True, False)
    return [("accel::rms_norm_hf", (x, w, 1e-6, False)), ("accel::swiglu", (gate, gate)),
            ("accel::rope", (q, k, cos, sin)), ("accel::linear_cross_entropy", lce),
            ("aten::_fused_rms_norm", (x, [2048], w, 1e-6)),
            ("aten::native_layer_norm", (x, [2048], w, w, 1e-5)),
            ("aten::_softmax", (gate, -1, False))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=None, help="write the report here too")
    args = p.parse_args(argv)
    import accel
    import accel.kernels as ak
    from accel.integrations import transformers as accel_hf

    device = torch.device("cuda")
    report: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name(device),
                    "backend_arch": accel.backend().arch(), "warnings": [], "ops": {}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report["installed"] = ak.install()
        from accel.kernels.dsl.launch import arch
        report["kernel_arch"] = arch(device)
        for op, call_args in _cases(device):
            entry: dict = {}
            try:
                entry["explain"] = str(ak.explain(op, *call_args))
            except Exception as exc:  # noqa: BLE001 - a probe reports every failure and goes on
                entry["explain"] = f"explain raised {type(exc).__name__}: {exc}"
            if op.startswith("accel::"):
                try:
                    entry["accel_takes"] = accel_hf.accel_takes(op, *call_args)
                except Exception as exc:  # noqa: BLE001
                    entry["accel_takes"] = f"raised {type(exc).__name__}: {exc}"
            try:
                ns, name = op.split("::")
                getattr(getattr(torch.ops, ns), name)(*call_args)
                torch.cuda.synchronize(device)
            except Exception as exc:  # noqa: BLE001
                entry["call"] = f"raised {type(exc).__name__}: {exc}"
            report["ops"][op] = entry
        report["counts"] = {o.name: {"routed": o.routed, "declined": o.declined} for o in ak.overrides()}
    report["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught][:40]
    text = json.dumps(report, indent=1, default=str)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
