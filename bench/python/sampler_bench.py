"""A Python trainer's sample() from the sampler service; prints ONE JSON line on stdout.

    .venv/bin/python bench/python/sampler_bench.py --socket /dev/shm/laminar/sampler-default.sock [--rounds 5]

The service must be running with the batch under test and enough trajectories in its buffer for
``--rounds`` batches, for example (what bench/python.ts starts):

    laminar sampler --nats URL --buffer sample --batch-size 512 --socket SOCK --shm-dir DIR --metrics-port -1

with 512 x (rounds + 2) trajectories of 4096 tokens (32 KiB of payload each) written first.

Figures:
- py_sample_ms_prefetch: median over the rounds of ``Sampler.sample()`` when the service has the
  batch prefetched already (the script waits for ``stats().readyBatches >= 1`` outside the timed
  part): the request, the descriptor, mapping the arena file and every numpy view, i.e. what a
  training loop waits for. Each batch is released before the next round (its arena is reused).
- py_batch_copies: arrays of the batches (tokens, logprobs, the per-item columns, item views)
  that do not read the shared file in place, summed over the rounds: 0 means zero-copy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python" / "src"))

from laminar.data import Sampler  # noqa: E402

READY_TIMEOUT_SECONDS = 120.0


def wait_prefetched(sampler: Sampler) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while sampler.stats()["readyBatches"] < 1:
        if time.monotonic() > deadline:
            raise SystemExit("sampler_bench: the service prefetched no batch (too few trajectories in the buffer?)")
        time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", required=True, help="socket of `laminar sampler`")
    parser.add_argument("--rounds", type=int, default=5, help="prefetched batches sampled (the median is reported)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")

    sampler = Sampler(args.socket)
    times: list[float] = []
    copies = 0
    items = 0
    payload = 0
    prefetched = 0
    for _ in range(args.rounds):
        wait_prefetched(sampler)
        started = time.perf_counter()
        batch = sampler.sample(timeout=60)
        times.append(time.perf_counter() - started)
        copies += batch.copies()
        prefetched += int(batch.prefetched)
        items = len(batch)
        payload = batch.bytes
        batch.release()
    sampler.close()
    # No "bench" key: bench/python.ts merges these figures into its own {"bench": "python", ...} line.
    result = {
        "rounds": args.rounds,
        "batch_items": items,
        "batch_payload_bytes": payload,
        "prefetched_rounds": prefetched,
        "py_sample_ms_prefetch": round(statistics.median(times) * 1e3, 3),
        "py_sample_ms_prefetch_max": round(max(times) * 1e3, 3),
        "py_batch_copies": copies,
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
