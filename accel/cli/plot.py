"""Pictures of ``accel bench`` results: GB/s per shape for ATen, each DSL, the routed call and the peers, with
the copy ceiling measured in the same run as a line (``accel bench --plot PATH``).

matplotlib is optional (``pip install '.[plot]'``): it is imported only when a picture is drawn, never by
``import accel`` or by ``accel bench`` without ``--plot``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from accel.errors import BenchArgumentError, FeatureUnavailableError

__all__ = ["check_plot", "plot_bench"]

#: Bar order and colours; a name outside it (a new peer, a config-named impl) comes after, in the report's order.
ORDER = ("aten", "triton", "helion", "cutedsl", "routed", "liger", "quack")
_COLOURS = {"aten": "#7f7f7f", "triton": "#1f77b4", "helion": "#2ca02c", "cutedsl": "#9467bd", "routed": "#d62728",
            "liger": "#ff7f0e", "quack": "#8c564b"}


def check_plot(path: str | Path) -> Path:
    """Check, before any measurement, that a picture can be written to ``path``.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        BenchArgumentError: (bad input) ``path`` does not end in ``.png``, or its folder does not exist.
        FeatureUnavailableError: matplotlib is not installed (``pip install '.[plot]'``).
    """
    p = Path(path)
    if p.suffix.lower() != ".png":
        raise BenchArgumentError(f"--plot {str(path)!r}: the picture is a PNG; give a path ending in .png, "
                                 f"e.g. --plot bench.png.")
    if not p.parent.is_dir():
        raise BenchArgumentError(f"--plot {str(path)!r}: folder {str(p.parent)!r} does not exist; create it first "
                                 f"or choose another path.")
    if importlib.util.find_spec("matplotlib") is None:
        raise FeatureUnavailableError("--plot needs matplotlib, which is not installed: pip install matplotlib "
                                      "(in your accel clone: pip install '.[plot]').")
    return p


def _panels(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    panels: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        panels.setdefault((r["op"], r["direction"], r["dtype"]), []).append(r)
    return panels


def plot_bench(report: dict[str, Any], path: str | Path) -> Path:
    """Draw an ``accel bench`` report as a PNG.

    One panel per (op, direction, dtype); along x the shapes ``[M, N]`` of its rows, and per shape one bar per
    implementation measured (``impls``: ATen, each DSL, ``routed``, the peers) at its GB/s; a dashed line at
    the copy ceiling (``copy_ceiling_gbs``, device-to-device bytes read + written per second, measured in the
    same run). An implementation a row could not time (``errors``) has no bar there.

    Args:
        report: :func:`accel.kernels.bench.run`'s report (``rows``: ``{"op", "dtype", "shape": [M, N],
            "direction", "impls": {name: {"gbs", ...}}, ...}``; ``copy_ceiling_gbs``; ``device``, ``arch``).
        path: the PNG to write (its folder must exist).

    Returns:
        The path written.

    Raises:
        BenchArgumentError: the report has no rows (nothing was measured), or ``path`` is no PNG path
            (:func:`check_plot`).
        FeatureUnavailableError: matplotlib is not installed.
    """
    rows = report.get("rows") or []
    if not rows:
        raise BenchArgumentError("--plot: the benchmark measured no row (every shape skipped: see 'skipped'), so "
                                 "there is nothing to draw; raise --budget or choose other --shapes.")
    p = check_plot(path)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = _panels(rows)
    ceiling = report.get("copy_ceiling_gbs")
    fig = Figure(figsize=(max(6.0, 1.6 * max(len(v) for v in panels.values()) + 2.5), 3.2 * len(panels)),
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, ((op, direction, dtype), group) in zip(axes, panels.items()):
        seen = list(dict.fromkeys(n for r in group for n in r["impls"]))
        names = [n for n in ORDER if n in seen] + [n for n in seen if n not in ORDER]
        width = 0.8 / max(1, len(names))
        for i, name in enumerate(names):
            xs = [j + (i - (len(names) - 1) / 2) * width for j, r in enumerate(group) if name in r["impls"]]
            ys = [r["impls"][name]["gbs"] for r in group if name in r["impls"]]
            ax.bar(xs, ys, width, label=name, color=_COLOURS.get(name.split(".")[0]))
        if ceiling:
            ax.axhline(ceiling, color="black", linestyle="--", linewidth=1, label=f"copy ceiling {ceiling:.0f} GB/s")
        ax.set_xticks(range(len(group)), [f"{r['shape'][0]}x{r['shape'][1]}" for r in group])
        ax.set_ylabel("GB/s")
        ax.set_title(f"{op} {direction}, {dtype}")
        ax.legend(fontsize="small", ncols=min(4, len(names) + 1), loc="lower right")
    fig.suptitle(f"accel bench on {report.get('device', '?')} ({report.get('arch', '?')}), "
                 f"torch {report.get('torch', '?')}")
    fig.savefig(p, dpi=100)
    return p
