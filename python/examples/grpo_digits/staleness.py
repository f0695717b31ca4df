"""Staleness of the trajectories a step trains on, in the two senses the metrics report.

- **Consumption staleness**: the version the trainer trains (the newest it has published) minus the
  version that generated the trajectory. It grows while a trajectory waits in the buffer.
- **Inherent staleness** (the paper's Figure 10): the trainer's version *when the trajectory
  completed* minus the version that generated it. It measures generation latency against the
  trainer's pace, independent of how long the trajectory then waited to be sampled.

The trainer knows when it published each version; a record carries ``completed_at`` (epoch ms)
and ``weight_version``: `VersionClock` turns the first into the trainer's version at that time.
Both sides read the same host's wall clock (the demo runs everything on one host); across hosts
the figure is as good as their clock sync.
"""

from __future__ import annotations

import bisect
from typing import Iterable, List, Sequence

import numpy as np


class VersionClock:
    """When each version became the trainer's (the time its publish returned), in epoch ms."""

    def __init__(self) -> None:
        self._times: List[float] = []
        self._versions: List[int] = []

    def published(self, version: int, at_ms: float) -> None:
        """Records that ``version`` became the trainer's at ``at_ms``; versions and times only go up."""
        if self._versions and (version <= self._versions[-1] or at_ms < self._times[-1]):
            raise ValueError(f"version {version} at {at_ms} after version {self._versions[-1]} at {self._times[-1]}")
        self._versions.append(version)
        self._times.append(at_ms)

    @property
    def first(self) -> int:
        return self._versions[0]

    def version_at(self, at_ms: float) -> int:
        """The trainer's version at ``at_ms``: the newest published at or before it. Before the
        first publish of this run (a record from an earlier run), the first version: what came
        before is not known here."""
        if not self._versions:
            raise ValueError("no version published yet")
        i = bisect.bisect_right(self._times, at_ms)
        return self._versions[max(i - 1, 0)]

    def inherent(self, completed_at_ms: Iterable[float], weight_versions: Iterable[int]) -> np.ndarray:
        """Inherent staleness of each record. Never below 0: an engine can see a version a few
        ms before the trainer's publish call returns, and a trajectory that short-lived would
        otherwise count -1."""
        return np.array([max(self.version_at(float(t)) - int(v), 0) for t, v in zip(completed_at_ms, weight_versions)], dtype=np.int64)


def summary(values: Sequence[int] | np.ndarray) -> dict:
    """``{p50, max, mean}`` of a batch's staleness values (all 0 for an empty batch)."""
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return {"p50": 0.0, "max": 0, "mean": 0.0}
    return {"p50": float(np.median(a)), "max": int(a.max()), "mean": round(float(a.mean()), 3)}
