"""The picture: serving capacity and failed requests over the upgrade (matplotlib PNG)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from drainsafe.simulate.requests import CAUSES
from drainsafe.simulate.simulation import Result, lowest_per_window

_CAUSE_LABELS = {
    "race": "refused/reset in the race",
    "cut_deadline": "cut at the shutdown deadline",
    "cut_sigkill": "cut by SIGKILL",
    "capacity": "rejected: no capacity",
}
_CAUSE_COLOURS = {"race": "#d62728", "cut_deadline": "#ff7f0e", "cut_sigkill": "#7f1d1d",
                  "capacity": "#9467bd"}
_BINS = 120


def draw(result: Result, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lc = result.lifecycle
    s = result.scenario
    start = lc.upgrade_started
    stop = lc.upgrade_finished if result.finished else lc.end
    stop = max(stop, start + 1.0)
    pad = 0.03 * (stop - start)
    lo, hi = start - pad, stop + pad
    hours = 3600.0 if stop - start > 7200 else 60.0
    unit = "h" if hours == 3600.0 else "min"

    fig, (ax_cap, ax_nodes, ax_fail) = plt.subplots(
        3, 1, figsize=(11, 8.5), sharex=True, height_ratios=[3, 1.3, 2.2])
    settings = s.workloads[0].termination
    fig.suptitle(
        f"{s.name}: {s.nodes} nodes x {s.gpus_per_node} GPUs, {s.upgrade.strategy} drain, "
        f"parallelism {s.upgrade.parallelism}, surge {s.upgrade.surge_nodes}, "
        f"drain delay {settings.drain_delay:g}s, grace {settings.grace:g}s", fontsize=11)

    # Capacity: each workload's Ready pods as a share of its replicas, and the GPU total.
    # A long upgrade has thousands of steps; drawn raw they blur into a band, so each line
    # shows the lowest value within each of _BINS windows (a dip is never hidden).
    t = lc.ready_times
    edges = np.linspace(lo, hi, _BINS * 3 + 1)
    x = (edges - start) / hours
    for w, wl in enumerate(s.workloads):
        frac = lowest_per_window(t, lc.ready_counts[:, w] / wl.replicas * 100, edges)
        ax_cap.step(x, np.append(frac, frac[-1]), where="post", lw=1.4,
                    label=f"{wl.name} ({wl.replicas} replicas)")
    _, total = result.capacity()
    lowest_total = lowest_per_window(t, total * 100, edges)
    ax_cap.step(x, np.append(lowest_total, lowest_total[-1]), where="post", lw=2.2,
                color="black", label="all workloads (GPU-weighted)")
    ax_cap.axhline(100, color="grey", lw=0.8, ls=":")
    floor = min(float(total.min()) * 100, *(float((lc.ready_counts[:, w] / wl.replicas).min())
                                            * 100 for w, wl in enumerate(s.workloads)))
    ax_cap.set_ylim(max(0.0, floor - max(2.0, (100 - floor) * 0.3)), 100 + max(
        1.0, (100 - floor) * 0.08))
    ax_cap.set_ylabel("Ready pods, % of desired")
    ax_cap.legend(loc="lower left", fontsize=8, framealpha=0.9)
    ax_cap.grid(alpha=0.3)
    window_s = edges[1] - edges[0]
    window = f"{window_s / 60:.0f}-min" if window_s >= 120 else f"{window_s:.0f}-s"
    ax_cap.set_title(f"serving capacity: lowest in each {window} window "
                     f"(overall lowest {result.min_capacity * 100:.1f}%)",
                     fontsize=10, loc="left")

    # Nodes in the upgrade at each moment: cordoned or down.
    began = lc.node_drain_started[~np.isnan(lc.node_drain_started)]
    ended = lc.node_back[~np.isnan(lc.node_drain_started)]
    ended = np.where(np.isnan(ended), lc.end, ended)
    edges = np.concatenate([began, ended])
    steps = np.concatenate([np.ones(len(began)), -np.ones(len(ended))])
    order = np.lexsort((steps, edges))  # at equal times a node leaves before the next joins
    busy = np.cumsum(steps[order])
    ax_nodes.step((edges[order] - start) / hours, busy, where="post", color="#1f77b4")
    ax_nodes.set_ylabel("nodes in\nupgrade")
    ax_nodes.set_ylim(0, max(1.0, float(busy.max()) if len(busy) else 1.0) * 1.25)
    ax_nodes.grid(alpha=0.3)

    # Failures per time bin, stacked by cause.
    ev = result.counts.events
    bins = np.linspace(lo, hi, _BINS + 1)
    width = (bins[1] - bins[0]) / hours
    bottom = np.zeros(_BINS)
    for i, cause in enumerate(CAUSES):
        mask = ev.cause == i
        counts, _ = np.histogram(ev.time[mask], bins=bins, weights=ev.count[mask])
        total_cause = result.counts.failures[cause]
        if total_cause == 0:
            continue
        ax_fail.bar((bins[:-1] - start) / hours, counts, width=width, bottom=bottom,
                    align="edge", color=_CAUSE_COLOURS[cause],
                    label=f"{_CAUSE_LABELS[cause]}: {total_cause:,}")
        bottom += counts
    bin_seconds = bins[1] - bins[0]
    per = f"{bin_seconds / 60:.0f} min" if bin_seconds >= 120 else f"{bin_seconds:.0f} s"
    ax_fail.set_ylabel(f"failed requests\nper {per}")
    if result.failed:
        ax_fail.legend(loc="upper right", fontsize=8, framealpha=0.9)
    else:
        ax_fail.text(0.5, 0.5, "no failed request", transform=ax_fail.transAxes,
                     ha="center", va="center", fontsize=12, color="green")
    ax_fail.set_title(
        f"{result.failed:,} of {result.counts.requests:,} requests failed"
        + ("" if result.finished else f"; WEDGED: {lc.wedged}"), fontsize=10, loc="left")
    ax_fail.grid(alpha=0.3)
    ax_fail.set_xlim((lo - start) / hours, (hi - start) / hours)
    ax_fail.set_xlabel(f"{unit} since the upgrade began")

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

