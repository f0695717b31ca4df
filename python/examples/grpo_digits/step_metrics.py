"""The trainer's per-step record: one JSON object per line of ``--metrics-out`` (flushed at each
step, so that the demo can follow the file as it grows), and the same as a readable stdout line.

Fields (flat, so that any consumer reads them without a schema):

| field | meaning |
|---|---|
| ``step``, ``version`` | the step just taken (1, 2, ...) and the version it published (start version + step) |
| ``time``, ``t`` | when the step ended: epoch seconds, and seconds since the trainer started |
| ``reward_mean``, ``reward_std`` | over the batch's trajectories |
| ``items``, ``groups``, ``response_tokens`` | the batch |
| ``loss``, ``kl``, ``clip_fraction``, ``behaviour_kl``, ``grad_norm`` | the update (grpo_update.UpdateStats) |
| ``staleness_p50``, ``staleness_max``, ``staleness_mean`` | consumption staleness: trained version − generating version |
| ``inherent_p50``, ``inherent_max``, ``inherent_mean`` | inherent staleness (paper, Fig. 10): trainer version at completion − generating version |
| ``weight_version_min``, ``weight_version_max`` | generating versions in the batch |
| ``sample_wait_ms`` | time in ``sampler.sample()`` (waiting for rollouts when the buffer is short) |
| ``train_ms`` | batch to tensors and the optimiser updates |
| ``publish_stall_ms`` | time in ``relay.publish()``: the trainer's stall for the weight path |
"""

from __future__ import annotations

import json
from typing import Any, TextIO


def format_line(record: dict[str, Any]) -> str:
    """The readable stdout line of a record."""
    r = record
    return (
        f"step {r['step']:4d} v{r['version']:<4d} reward {r['reward_mean']:.3f}  loss {r['loss']:+.4f}  clip {r['clip_fraction']:.2f}  "
        f"staleness p50 {r['staleness_p50']:g} max {r['staleness_max']}  inherent p50 {r['inherent_p50']:g} max {r['inherent_max']}  "
        f"wait {r['sample_wait_ms']:.0f}ms  train {r['train_ms']:.0f}ms  publish {r['publish_stall_ms']:.1f}ms"
    )


class MetricsLog:
    """Writes records as JSONL (when a path is given) and readable lines to ``out``. ``append``
    keeps what the file holds (a trainer resuming a run), else it starts empty."""

    def __init__(self, path: str | None, out: TextIO, append: bool = False) -> None:
        self._file = open(path, "a" if append else "w", encoding="utf-8") if path else None
        self._out = out

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._file.flush()
        print(format_line(record), file=self._out, flush=True)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
