"""The PNG plots of bench/results/, from the series the benchmarks hand back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from harness import Outcome, percentile

COLORS = {
    "hubjobs": "tab:blue",
    "floor": "tab:green",
    "physical": "tab:olive",
    "seed loop": "tab:red",
}


def tagging(series: dict[str, Any], out: Path) -> Path:
    sizes = series["sizes"]
    fig, (ax, side) = plt.subplots(1, 2, figsize=(12, 4.5))
    for who, per_size in series["rates"].items():
        points = [(s, r) for s in sizes for r in per_size[s] if r == r]
        ax.scatter(
            [p[0] for p in points],
            [p[1] for p in points],
            s=12,
            alpha=0.4,
            color=COLORS.get(who, "tab:gray"),
        )
        ax.plot(
            sizes,
            [series["median"][who][s] for s in sizes],
            marker="o",
            label=who,
            color=COLORS.get(who, "tab:gray"),
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("course size (pages)")
    ax.set_ylabel("pages per second (created → finished)")
    ax.set_title("Tagging a course: hubjobs, the SQL floors and the seed loop")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best")
    found = series.get("hubjobs_median_phases", {})
    if found:
        xs = [s for s in sizes if str(s) in found]
        side.plot(
            xs,
            [found[str(s)].get("start call", 0) for s in xs],
            marker="o",
            color="tab:blue",
            label="start call (s)",
        )
        side.axhline(1.0, color="tab:red", linestyle="--", label="1 s target")
        side.set_xscale("log")
        side.set_yscale("log")
        side.set_xlabel("course size (pages)")
        side.set_ylabel("hubjobs start call (s)")
        rss = side.twinx()
        peaks = [found[str(s)].get("peak RSS MB", 0) for s in xs]
        rss.plot(
            xs,
            peaks,
            marker="s",
            color="tab:purple",
            label="worker peak RSS (MB)",
        )
        rss.set_ylabel("worker peak RSS (MB)")
        rss.set_ylim(0, max(peaks, default=1) * 1.4)
        lines = side.get_legend_handles_labels()
        more = rss.get_legend_handles_labels()
        side.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left")
        side.set_title("hubjobs: the start call and worker memory by size")
        side.grid(True, which="both", alpha=0.3)
    path = out / "tagging.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def job_latency(series: dict[str, Any], out: Path) -> Path:
    fig, (hist, cdf) = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = {
        "hubjobs": "hubjobs 1-page job",
        "floor": "floor: 1 activity, same writes",
        "bare": "bare workflow, no database",
    }
    colors = {"hubjobs": "tab:blue", "floor": "tab:green", "bare": "tab:gray"}
    top = max(percentile(v, 99) for v in series["ms"].values()) * 1.1
    for who, values in series["ms"].items():
        color = colors.get(who, "tab:gray")
        hist.hist(values, bins=30, range=(0, top), alpha=0.6, label=labels[who], color=color)
        ordered = sorted(values)
        cdf.step(
            ordered,
            [(i + 1) / len(ordered) for i in range(len(ordered))],
            where="post",
            label=labels[who],
            color=color,
        )
        cdf.axvline(percentile(values, 50), color=color, linestyle=":", alpha=0.8)
    hist.set_xlabel("start → final (ms)")
    hist.set_ylabel("runs")
    hist.legend()
    cdf.set_xlabel("start → final (ms)")
    cdf.set_ylabel("fraction of runs")
    cdf.set_xlim(0, top)
    cdf.grid(True, alpha=0.3)
    cdf.legend(loc="lower right")
    fig.suptitle("Per-job cost on an idle server (dotted: medians)")
    path = out / "job_latency.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def backup(series: dict[str, Any], out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    for n, samples in enumerate(series["rss"]):
        ax.plot([s[0] for s in samples], [s[1] for s in samples], label=f"backup {n + 1}")
    ax.axhline(series["idle_mb"], color="gray", linestyle=":", label="worker idle")
    ax.set_xlabel("seconds since the start call")
    ax.set_ylabel("worker RSS (MB)")
    top = max([s[1] for samples in series["rss"] for s in samples] + [series["idle_mb"]])
    ax.set_ylim(0, top * 1.2)
    ax.set_title(f"Worker memory while backing up a {series['database_mb']:.0f} MB hub")
    ax.grid(True, alpha=0.3)
    ax.legend()
    path = out / "backup_rss.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def readmodel(series: dict[str, Any], out: Path) -> Path:
    labels = list(series["p99_ms"])
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(labels) + 1.5))
    ys = range(len(labels))
    ax.barh(
        [y + 0.2 for y in ys],
        [series["p99_ms"][k] for k in labels],
        height=0.4,
        label="p99",
        color="tab:blue",
    )
    ax.barh(
        [y - 0.2 for y in ys],
        [series["p50_ms"][k] for k in labels],
        height=0.4,
        label="p50",
        color="tab:cyan",
    )
    ax.axvline(series["probe_p99_ms"], color="gray", linestyle=":", label="PK probe p99")
    ax.axvline(5, color="tab:red", linestyle="--", label="5 ms target")
    ax.set_yticks(list(ys), labels)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("ms per query (client round trip)")
    ax.set_title(f"Read-model queries at {series['rows']:,} job rows")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    path = out / "readmodel.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def capacity(series: dict[str, Any], out: Path) -> Path:
    fig, (lat, cpu) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = {"hubjobs": "tab:blue", "floor": "tab:green"}
    for who, steps in series["steps"].items():
        offered = [s["offered"] for s in steps]
        color = colors.get(who, "tab:gray")
        lat.plot(offered, [s["p50_ms"] for s in steps], marker="o", color=color, label=f"{who} p50")
        lat.plot(
            offered,
            [s["p99_ms"] for s in steps],
            marker="^",
            linestyle="--",
            color=color,
            label=f"{who} p99",
        )
        knee = series["knees"].get(who)
        if knee:
            lat.axvline(knee["offered"], color=color, linestyle=":", alpha=0.7)
        if who == "hubjobs":
            names = [k for k in steps[0]["cpu"] if not k.startswith("machine")]
            for name in names:
                cpu.plot(offered, [s["cpu"][name] * 100 for s in steps], marker="o", label=name)
            cpu.plot(
                offered,
                [s["cpu"]["machine (share of all cores)"] * 100 for s in steps],
                color="black",
                linestyle="--",
                label="machine (all cores)",
            )
    lat.set_yscale("log")
    lat.set_xlabel("offered one-page jobs/s")
    lat.set_ylabel("start → final (ms)")
    lat.set_title("Latency against offered load (dotted: the knee)")
    lat.grid(True, which="both", alpha=0.3)
    lat.legend(loc="upper left")
    cpu.set_xlabel("offered one-page jobs/s")
    cpu.set_ylabel("CPU (% of one core)")
    cpu.set_title("hubjobs: CPU per process")
    cpu.grid(True, alpha=0.3)
    cpu.legend(loc="upper left", fontsize=8)
    path = out / "capacity.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def peers(series: dict[str, Any], out: Path) -> Path:
    results = {k: v for k, v in series["results"].items() if "error" not in v}
    names = list(results)
    bursts = series["bursts"]
    fig, axes = plt.subplots(1, 1 + len(bursts), figsize=(4.5 * (1 + len(bursts)), 4.2))
    colors = [
        "tab:green" if n == "floor" else "tab:blue" if n == "hubjobs" else "tab:gray" for n in names
    ]
    bars = axes[0].bar(names, [percentile(results[n]["ms"], 50) for n in names], color=colors)
    axes[0].bar_label(bars, fmt="%.0f")
    axes[0].set_ylabel("one job, start → final, p50 (ms)")
    axes[0].set_title("One job on an idle system")
    for ax, b in zip(axes[1:], bursts, strict=True):
        bars = ax.bar(names, [results[n][f"burst_{b}"] for n in names], color=colors)
        ax.bar_label(bars, fmt="%.0f")
        ax.set_ylabel("jobs/s until all final")
        ax.set_title(f"{b:,} started at once")
    for ax in axes:
        ax.tick_params(axis="x", rotation=30)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.suptitle("The peers beside hubjobs and the Temporal floor (same one-page transaction)")
    path = out / "peers.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


PLOTS: dict[str, Callable[[dict[str, Any], Path], Path]] = {
    "tagging": tagging,
    "job_latency": job_latency,
    "backup": backup,
    "readmodel": readmodel,
    "capacity": capacity,
    "peers": peers,
}


def render(outcomes: dict[str, Outcome], out: Path) -> dict[str, Path]:
    """Each plot drawn, by its benchmark's name (results.json says which is whose)."""
    out.mkdir(parents=True, exist_ok=True)
    return {
        name: PLOTS[name](outcome.series, out)
        for name, outcome in outcomes.items()
        if name in PLOTS and outcome.series
    }
