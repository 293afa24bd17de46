"""``accel kernels``: the kernel overrides of this process and the built-in kernels usable here."""

from __future__ import annotations

import argparse

from accel.cli._output import cell, command_error, console, print_json, table
from accel.cli.schemas import stamp

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``kernels`` to the ``accel`` command line."""
    p = subparsers.add_parser("kernels", help="list kernel overrides (op, DSL, backends, active, routed/fallback counts)",
                              description="List accel's kernel overrides and the built-in kernels usable here.",
                              epilog="Exit status: 0; 1 with --install when no built-in kernel could be installed "
                                     "(the built-in table says why).")
    p.add_argument("--json", action="store_true",
                   help="print JSON instead of tables (schema accel.kernels; its 'installed' lists what --install registered: null "
                        "without --install, [] when it registered nothing)")
    p.add_argument("--install", action="store_true",
                   help="register every available built-in kernel first (accel.kernels.install())")
    p.set_defaults(func=run)


def _arch() -> tuple[str | None, str]:
    """``(arch, backend name)`` of the active backend's current device where it is a GPU backend some built-in
    kernel is registered for (``("gfx942", "rocm")``), else ``(None, name)``. Initialises that runtime."""
    import accel
    from accel.kernels import catalog

    backend = accel.backend()
    if not any(backend.name in backends for *_rest, backends in catalog.builtin()):
        return None, backend.name
    return backend.arch(accel.device().index or 0), backend.name


def report() -> dict:
    """``{"registry_path", "native_registry", "arch", "backend", "overrides": [...], "builtin": [...]}``
    (JSON-ready). Each built-in row carries ``tuning``: how the active GPU's arch's tables route it
    (``"installed, not tuned for gfx942: run `accel bench --tune`"``), ``null`` where the active backend
    is no GPU it is registered for."""
    import accel.kernels as ak
    from accel import _compat
    from accel.kernels import catalog

    arch, backend = _arch()
    states = catalog.tuning_states(arch, backend) if arch is not None else {}
    return {
        "registry_path": ak.registry_path(),
        "native_registry": _compat.native_dsl_registry_reason(),
        "arch": arch,
        "backend": backend,
        "overrides": [o.as_dict() for o in ak.overrides()],
        "builtin": [dict(a.as_dict(), tuning=states.get((a.kernel, a.dsl))) for a in ak.availability()],
    }


def run(args: argparse.Namespace) -> int:
    """Print the report; returns 0, or 1 when ``--install`` left no override registered (then an
    ``accel kernels: error:`` line on stderr, and the JSON report carries an ``error`` object too)."""
    added = None
    if args.install:
        import accel.kernels as ak

        added = ak.install()
    data = report()
    failed = added is not None and not data["overrides"]
    args.exit_code = 1 if failed else 0  # kept if the reader leaves early (`accel kernels --install | head -1`)
    if failed:
        data["error"] = command_error("kernels", "KernelUnavailableError", (
            "--install registered no built-in kernel: none can be installed here; the built-in table says why "
            "for each (no accelerator this torch serves, or a DSL not installed)."))
    if args.json:
        print_json(stamp("accel.kernels", dict(data, installed=added)))
        return args.exit_code
    out = console()
    rows = [[o["name"], o["op"], o["dsl"], ",".join(o["backends"]), ",".join(sorted(set(o["paths"].values()))),
             "yes" if o["active"] else f"no: {o['inactive_reason']}", o["routed"], o["fallbacks"], o["failed"]]
            for o in data["overrides"]]
    t = table(f"kernel overrides (registry path: {data['registry_path']})",
              ["name", "op", "DSL", "backends", "path", "active", "routed", "fallbacks", "failed"], rows)
    if not data["overrides"]:
        t.caption = ("none registered: no built-in kernel can be installed here (reasons below)" if args.install
                     else "none registered in this process (accel.kernels.install() or accel kernels --install)")
    out.print(t)
    tuned = f"tuning ({data['arch']})" if data["arch"] else "tuning"
    out.print(table("built-in kernels", ["kernel", "DSL", "backends", "available", "installed", tuned, "reason"],
                    [[a["kernel"], a["dsl"], ",".join(a["backends"]), "yes" if a["available"] else "no",
                      "yes" if a["installed"] else "no", a["tuning"], a["reason"]] for a in data["builtin"]]))
    out.print(f"native DSL registry: {cell(data['native_registry'])}")
    return args.exit_code
