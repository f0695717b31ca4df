"""Trajectories/s written to the experience buffer from Python; prints ONE JSON line on stdout.

    .venv/bin/python bench/python/writer_bench.py --nats-url nats://127.0.0.1:4222 [--buffer py]
        [--count 4000] [--payload-bytes 16384] [--concurrency 64]

`laminar.data.ExperienceWriter.write_many` of `--count` trajectories of `--payload-bytes` of
payload (int32 tokens + float32 logprobs: payload-bytes / 8 tokens), `--concurrency` writes in
flight, as the TypeScript writer is measured in bench/python.ts (the same trajectory shape, a
window of 64). The trajectories are built before the clock starts: the figure is the writer's
(validation, metadata encoding, publish and acknowledgement), not the generator's. The buffer
must not hold these ids already (every write must store: a duplicate fails the bench).

Figures: py_writes_per_s (the headline), py_writer_seconds, and the settings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python" / "src"))

import nats  # noqa: E402
import numpy as np  # noqa: E402

from laminar.data import ExperienceWriter  # noqa: E402


def trajectories(count: int, tokens: int) -> List[Dict[str, Any]]:
    """bench/python.ts's trajectory shape: one token id and one logprob repeated, groups of 8."""
    template_tokens = np.full(tokens, 7, dtype=np.int32)
    template_logprobs = np.full(tokens, -0.5, dtype=np.float32)
    return [
        {
            "id": f"py-{n}",
            "promptId": f"p{n >> 3}",
            "groupId": f"g{n >> 3}",
            "sampleIndex": n & 7,
            "groupSize": 8,
            "weightVersion": 1,
            "reward": (n % 7) / 7,
            "tokens": template_tokens,
            "logprobs": template_logprobs,
            "promptLength": tokens // 4,
            "responseLength": tokens - tokens // 4,
        }
        for n in range(count)
    ]


async def run(args: argparse.Namespace) -> Dict[str, Any]:
    nc = await nats.connect(args.nats_url)
    try:
        writer = await ExperienceWriter.open(nc, args.buffer)
        items = trajectories(args.count, args.payload_bytes // 8)
        t0 = time.perf_counter()
        results = await writer.write_many(items, concurrency=args.concurrency)
        seconds = time.perf_counter() - t0
    finally:
        await nc.close()
    duplicates = sum(r.duplicate for r in results)
    if duplicates:
        raise SystemExit(f"writer_bench: {duplicates} of {args.count} writes were duplicates: use an empty buffer")
    return {
        "py_writes_per_s": round(args.count / seconds),
        "py_writer_seconds": round(seconds, 3),
        "py_writer_count": args.count,
        "py_writer_payload_bytes": args.payload_bytes,
        "py_writer_concurrency": args.concurrency,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nats-url", required=True, help="a nats-server with JetStream")
    parser.add_argument("--buffer", default="py", help="buffer written (must not hold the bench's ids)")
    parser.add_argument("--count", type=int, default=4000, help="trajectories written")
    parser.add_argument("--payload-bytes", type=int, default=16384, help="payload per trajectory (a multiple of 8)")
    parser.add_argument("--concurrency", type=int, default=64, help="writes in flight")
    args = parser.parse_args()
    if args.count < 1 or args.concurrency < 1 or args.payload_bytes < 8 or args.payload_bytes % 8:
        parser.error("--count and --concurrency must be >= 1, --payload-bytes a positive multiple of 8")
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
