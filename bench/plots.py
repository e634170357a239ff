"""PNG plots of the benchmark results (matplotlib, no display needed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["baseline", "batching", "overhead", "pool", "save", "subtitle"]


def subtitle(report: dict[str, Any]) -> str:
    m = report["machine"]
    return f"{m['cpus']} cores ({m['cpu_model']}), {report['started']}, loopback"


def save(fig: Any, title: str, path: Path) -> None:
    """Title the figure, lay it out and write it as a PNG."""
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _log_ms_axis(axis: Any) -> None:
    axis.set_yscale("log")
    low, high = axis.get_ylim()
    ticks = [t for t in (1, 2, 5, 10, 20, 50, 100, 200, 400, 800, 1600, 3200, 6400) if low <= t <= high]
    axis.set_yticks(ticks, [str(t) for t in ticks])
    axis.yaxis.set_minor_formatter(mpl.ticker.NullFormatter())


def _concurrency_axis(axis: Any, levels: list[int]) -> None:
    axis.set_xscale("log", base=2)
    axis.set_xticks(levels, [str(level) for level in levels])
    axis.set_xlabel("concurrency (closed loop)")


def overhead(report: dict[str, Any], path: Path) -> None:
    summary = report["summary"]
    names = list(summary)
    colors = ["#888888", "#1f77b4", "#2ca02c"][: len(names)]
    panels = [("rps", "rps_ratio", "httpx load generator, concurrency 16", "requests/s (200)"),
              ("wrk_rps", "wrk_rps_ratio", "wrk, concurrency 16", "requests/s (200)"),
              ("single_median_ms", None, "median latency at concurrency 1 (httpx)", "ms"),
              ("wrk_single_median_ms", None, "median latency at concurrency 1 (wrk)", "ms")]  # fmt: skip
    panels = [panel for panel in panels if panel[0] in summary[names[0]]]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 4.2))
    for axis, (key, ratio, title, unit) in zip(axes, panels, strict=True):
        bars = axis.bar(range(len(names)), [summary[n][key] for n in names], color=colors)
        labels = [f"{summary[n][key]:.0f}\n({summary[n][ratio]:.0%})" if ratio else f"{summary[n][key]:.2f} ms"
                  for n in names]  # fmt: skip
        axis.bar_label(bars, labels=labels, fontsize=9)
        axis.set_xticks(range(len(names)), [n.replace(" (", "\n(").replace("gateway ", "gateway\n") for n in names],
                        fontsize=8)  # fmt: skip
        axis.set_ylabel(unit)
        axis.set_title(title, fontsize=10)
        axis.margins(y=0.25)
    save(fig, f"Gateway overhead, pcm, vs a bare Litestar route (% of bare) — {subtitle(report)}", path)


def pool(report: dict[str, Any], path: Path) -> None:
    rows = report["rows"]
    levels = [row["concurrency"] for row in rows]
    theory = report["theory_rps"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(levels, [row["rps"] for row in rows], "o-", label="gateway: 200 responses/s")
    left.axhline(theory, color="black", linestyle="--", label=f"P/L = {theory:g} req/s")
    left.axhline(0.95 * theory, color="red", linestyle=":", label="95 % target")
    for row in rows:
        left.annotate(f"{row['efficiency']:.1%} of P/L", (row["concurrency"], row["rps"]), textcoords="offset points",
                      xytext=(0, -28), ha="center", fontsize=9)  # fmt: skip
    left.set_ylim(0, theory * 1.3)
    left.set_xlim(levels[0] / 1.5, levels[-1] * 1.5)
    _concurrency_axis(left, levels)
    left.set_ylabel("requests/s")
    left.set_title(f"throughput, P = {report['workers']} workers, L = {report['delay_ms']:g} ms")
    left.legend(loc="lower right", fontsize=8)
    right.plot(levels, [row["median_ms"] for row in rows], "o-", label="200: median")
    right.plot(levels, [row["p99_ms"] for row in rows], "o--", label="200: p99")
    rejected = [(row["concurrency"], row["rejected_median_ms"], row["rejected_share"]) for row in rows
                if row["rejected_median_ms"] is not None]  # fmt: skip
    if rejected:
        right.plot([r[0] for r in rejected], [r[1] for r in rejected], "s-", color="red", label="503: median")
        for level, latency, share in rejected:
            right.annotate(f"{share:.0%} of requests", (level, latency), textcoords="offset points", xytext=(0, 8),
                           ha="center", fontsize=8, color="red")  # fmt: skip
    _log_ms_axis(right)
    right.set_xlim(levels[0] / 1.5, levels[-1] * 1.5)
    _concurrency_axis(right, levels)
    right.set_ylabel("latency, ms (log)")
    right.set_title(f"latency, queue_size {report['queue_size']}")
    right.legend(fontsize=8)
    save(fig, f"Pool efficiency — {subtitle(report)}", path)


def baseline(report: dict[str, Any], path: Path) -> None:
    levels = report["levels"]
    theory = report["theory_rps"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = zip("os^dv", ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b"], strict=False)
    for (name, rows), (marker, color) in zip(report["series"].items(), styles, strict=False):
        left.plot(levels, [row["rps"] for row in rows], marker + "-", color=color, label=name)
        right.plot(levels, [row["mean_ms"] for row in rows], marker + "-", color=color, label=f"{name}: mean")
        right.plot(levels, [row["p99_ms"] for row in rows], marker + ":", color=color, label="_p99", alpha=0.6)
    left.axhline(theory, color="black", linestyle="--", label=f"P/L = {theory:g} req/s")
    left.set_ylim(0, theory * 1.3)
    bound = [max(report["delay_ms"], level / theory * 1000) for level in levels]
    right.plot(levels, bound, "k--", linewidth=1, label="ideal mean: max(L, c / (P/L))")
    right.plot([], [], ":", color="gray", label="p99 (dotted, same colour)")
    _log_ms_axis(right)
    for axis in (left, right):
        _concurrency_axis(axis, levels)
    left.set_ylabel("requests/s (200)")
    left.set_title(f"throughput, P = {report['workers']}, L = {report['delay_ms']:g} ms")
    left.legend(loc="lower right", fontsize=8)
    right.set_ylabel("latency, ms (log)")
    right.set_title("latency")
    right.legend(fontsize=7)
    save(fig, f"Gateway vs Flask with a global lock — {subtitle(report)}", path)


def batching(report: dict[str, Any], path: Path, *, target: float) -> None:
    """ChatTTS throughput and time to first byte against concurrency, batching off and on."""
    rows = report["rows"]
    levels = report["levels"]
    base = next(r["throughput"] for r in rows if not r["batching"] and r["concurrency"] == 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for batching, style in ((False, "o--"), (True, "o-")):
        mode = [r for r in rows if r["batching"] is batching]
        label = "batching on" if batching else "batching off (max_batch 1)"
        left.plot([r["concurrency"] for r in mode], [r["throughput"] / base for r in mode], style, label=label)
        right.plot([r["concurrency"] for r in mode], [r["ttfb_median_s"] for r in mode], style, label=label)
    left.axhline(target, color="red", linestyle=":", label=f"target: {target:g}x at concurrency 4")
    left.axhline(1.0, color="black", linewidth=0.8)
    left.set_ylim(0, max(target, *(r["throughput"] / base for r in rows)) * 1.2)
    left.set_ylabel("throughput, x one unbatched worker")
    left.set_title(f"one worker, {report['tokens']} audio tokens per request")
    right.set_ylim(0, max(r["ttfb_median_s"] for r in rows) * 1.2)
    right.set_ylabel("median time to first audio, s")
    right.set_title(f"each level run {report['repeat']} time(s), pooled")
    for axis in (left, right):
        axis.set_xlim(levels[0] / 1.5, levels[-1] * 1.5)
        _concurrency_axis(axis, levels)
        axis.legend(fontsize=8)
    save(fig, f"ChatTTS dynamic batching, full-size random weights — {subtitle(report)}", path)
