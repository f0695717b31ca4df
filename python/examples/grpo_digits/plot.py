"""A PNG of a GRPO run from the trainer's metrics JSONL: mean reward (per step and smoothed) above,
inherent and consumption staleness below, over wall-clock time (``--x t``, default) or steps.

    .venv/bin/python python/examples/grpo_digits/plot.py /tmp/grpo.jsonl --out /tmp/grpo.png

Needs matplotlib (Debian: ``apt-get install python3-matplotlib``; the environment sees system
packages). Renders with the Agg backend: no display needed. Lines that are not JSON objects with
``step`` and ``reward_mean`` are skipped (a file being written may end in half a line).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional, Sequence

import matplotlib

matplotlib.use("Agg")  # before pyplot: a headless host has no display

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator
import numpy as np

from laminar import error_codes
from laminar.errors import LaminarError


def read_metrics(path: str) -> list[dict[str, Any]]:
    """The step records of a metrics file, in file order."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "step" in record and "reward_mean" in record:
                records.append(record)
    return records


def smooth(values: Sequence[float], window: int) -> np.ndarray:
    """Trailing moving average (the first points average what there is)."""
    v = np.asarray(values, dtype=np.float64)
    if window <= 1 or v.size == 0:
        return v
    sums = np.cumsum(np.insert(v, 0, 0.0))
    out = np.empty_like(v)
    for i in range(v.size):
        lo = max(0, i + 1 - window)
        out[i] = (sums[i + 1] - sums[lo]) / (i + 1 - lo)
    return out


def plot(records: list[dict[str, Any]], out: str, x_axis: str = "t", title: Optional[str] = None, window: int = 10) -> None:
    """Writes the PNG of ``records`` to ``out``."""
    if not records:
        raise LaminarError(error_codes.INVALID_ARG, "no step records to plot")
    x = np.array([r.get(x_axis, r["step"]) for r in records], dtype=np.float64)
    xlabel = "time since the trainer started (s)" if x_axis == "t" else "step"
    reward = [r["reward_mean"] for r in records]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    top.plot(x, reward, color="#9ecae1", linewidth=0.8, label="mean reward of the batch")
    top.plot(x, smooth(reward, window), color="#08519c", linewidth=2.0, label=f"moving average ({window} steps)")
    top.set_ylabel("reward")
    top.set_ylim(0, 1)
    top.grid(alpha=0.3)
    top.legend(loc="upper left")
    first, last = float(np.mean(reward[: max(1, len(reward) // 10)])), float(np.mean(reward[-max(1, len(reward) // 10) :]))
    top.set_title(title or f"GRPO on digits: reward {first:.2f} → {last:.2f} over {len(records)} steps (first / last tenth)")
    highest = 0.0
    for key, label, color, style in (
        ("inherent_max", "inherent staleness, max", "#d94801", "-"),
        ("inherent_p50", "inherent staleness, p50", "#fd8d3c", "--"),
        ("staleness_max", "consumption staleness, max", "#54278f", "-"),
        ("staleness_p50", "consumption staleness, p50", "#9e9ac8", "--"),
    ):
        if all(key in r for r in records):
            values = [r[key] for r in records]
            highest = max(highest, max(values))
            bottom.step(x, values, where="post", color=color, linestyle=style, linewidth=1.2, label=label)
    bottom.set_ylabel("versions behind")
    bottom.set_xlabel(xlabel)
    bottom.set_ylim(0, highest * 1.4 + 1)  # room above the lines for the legend
    bottom.yaxis.set_major_locator(MaxNLocator(integer=True))
    bottom.grid(alpha=0.3)
    bottom.legend(loc="upper left", fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description="Plot a GRPO run: reward and staleness from the trainer's metrics JSONL.")
    p.add_argument("metrics", help="the trainer's --metrics-out file")
    p.add_argument("--out", default="grpo-digits.png", help="PNG to write (default %(default)s)")
    p.add_argument("--x", choices=("t", "step"), default="t", help="x axis: seconds since start (t) or step (default %(default)s)")
    p.add_argument("--window", type=int, default=10, help="steps in the reward's moving average (default %(default)s)")
    p.add_argument("--title", help="title (default: the reward's first and last tenth)")
    args = p.parse_args(argv)
    try:
        records = read_metrics(args.metrics)
        plot(records, args.out, x_axis=args.x, title=args.title, window=args.window)
    except (OSError, LaminarError) as err:
        print(f"plot failed: {err}", file=sys.stderr)
        return 1
    print(f"wrote {args.out} ({len(records)} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
