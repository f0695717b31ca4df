"""A PNG of a soak run (``npm run soak``) from its output directory: completions per minute and the
trainer's version on top, then RSS and open file descriptors per kind of process, then the relays'
segments and the NATS consumers; every fault is marked as a band from its start to its end,
coloured by kind.

    .venv/bin/python python/tools/plot_soak.py soak-out        # writes soak-out/soak.png

Reads ``timeline.jsonl`` and ``faults.jsonl`` of the directory. Renders with the Agg backend: no
display needed.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: a headless host has no display

import matplotlib.pyplot as plt  # noqa: E402

GROUPS = ["relay", "rollout", "manager", "trainer", "nats-server", "redis-server", "soak"]


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """The JSON objects of a file, one per line; broken lines (a file being written) skipped."""
    records = []
    if not os.path.exists(path):
        return records
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def mark_faults(ax: Any, faults: list[dict[str, Any]], colours: dict[str, Any]) -> None:
    """A translucent band per applied fault, from its start to its end (minutes)."""
    for f in faults:
        if f.get("note"):
            continue
        start = f["startMs"] / 60_000
        end = (f.get("endMs") or f["startMs"]) / 60_000
        ax.axvspan(start, max(end, start + 0.02), color=colours[f["kind"]], alpha=0.12, linewidth=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the soak's output directory")
    parser.add_argument("--png", help="where the PNG goes (default: <out>/soak.png)")
    args = parser.parse_args()
    samples = read_jsonl(os.path.join(args.out, "timeline.jsonl"))
    faults = read_jsonl(os.path.join(args.out, "faults.jsonl"))
    if len(samples) < 2:
        raise SystemExit(f"{args.out}/timeline.jsonl has {len(samples)} samples: nothing to plot")
    minutes = [s["atMs"] / 60_000 for s in samples]
    kinds = sorted({f["kind"] for f in faults})
    cmap = plt.get_cmap("tab10")
    colours = {k: cmap(i % 10) for i, k in enumerate(kinds)}

    fig, axes = plt.subplots(4, 1, figsize=(12, 12), sharex=True)
    rate = [0.0] + [(b["completed"] - a["completed"]) / max(1e-9, (b["atMs"] - a["atMs"]) / 60_000) for a, b in zip(samples, samples[1:])]
    ax = axes[0]
    ax.plot(minutes, rate, color="black", label="trajectories completed / min")
    ax.set_ylabel("completions / min")
    twin = ax.twinx()
    twin.plot(minutes, [s["trainerVersion"] for s in samples], color="tab:blue", linestyle="--", label="trainer version")
    twin.set_ylabel("trainer version")
    mark_faults(ax, faults, colours)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k], alpha=0.4) for k in kinds]
    ax.legend(handles, kinds, loc="upper left", fontsize=7, ncol=5, title="faults", title_fontsize=7)

    ax = axes[1]
    for g in GROUPS:
        ax.plot(minutes, [s["rssBytes"][g] / 2**20 for s in samples], label=g)
    ax.set_ylabel("RSS (MiB)")
    ax.legend(loc="upper left", fontsize=7, ncol=4)
    mark_faults(ax, faults, colours)

    ax = axes[2]
    for g in GROUPS:
        ax.plot(minutes, [s["fds"][g] for s in samples], label=g)
    ax.set_ylabel("open fds")
    ax.legend(loc="upper left", fontsize=7, ncol=4)
    mark_faults(ax, faults, colours)

    ax = axes[3]
    ax.plot(minutes, [s["shmFiles"] for s in samples], label="relay segments")
    ax.plot(minutes, [s["consumers"] for s in samples], label="NATS consumers")
    ax.set_ylabel("count")
    ax.set_xlabel("minutes")
    ax.legend(loc="upper left", fontsize=7)
    mark_faults(ax, faults, colours)

    applied = sum(1 for f in faults if not f.get("note"))
    fig.suptitle(f"soak: {applied} faults over {minutes[-1]:.0f} min")
    fig.tight_layout()
    fig.savefig(args.png or os.path.join(args.out, "soak.png"), dpi=90)


if __name__ == "__main__":
    main()
