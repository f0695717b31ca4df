"""Publishing non-contiguous torch tensors as they are against making them contiguous first: the
client's copies into a segment and their checksums (SegmentWriter, no relay: its begin and commit
are the same either way). Prints ONE JSON line on stdout.

    .venv/bin/python bench/python/strided_publish_bench.py [--rounds 20] [--copy-threads 2]

38 MiB of tensors: two transposed matrices (float32, bfloat16), a column-strided and a sliced
one. Rounds alternate the two ways; the figures are medians (and minimums) of wall time and of
the process's CPU time, the steadier of the two on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import mmap
import statistics
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from laminar.relay.layout import ChunkGrid
from laminar.relay.protocol import TensorInfo
from laminar.relay.segment_writer import SegmentWriter
from laminar.relay.dtypes import safetensors_dtype
from laminar.relay.tensor_source import tensor_source

CHUNK_BYTES = 4 << 20


def tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "transposed_f32": torch.randn(1536, 2048, generator=g).t(),
        "transposed_bf16": torch.randn(2048, 1536, generator=g).to(torch.bfloat16).t(),
        "strided_f32": torch.randn(3072, 2048, generator=g)[:, ::2],
        "sliced_f16": torch.randn(2048, 3072, generator=g).half()[:, 1024:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--copy-threads", type=int, default=2)
    args = parser.parse_args()
    state = tensors()
    infos, at = {}, 0
    for name, t in state.items():
        size = t.numel() * t.element_size()
        infos[name] = TensorInfo(name, safetensors_dtype(t.dtype), tuple(t.shape), at, size)
        at += size
    segment = mmap.mmap(-1, at)
    np.frombuffer(segment, np.uint8)[:] = 0  # faulted in, as the relay's MAP_POPULATE does
    with ThreadPoolExecutor(args.copy_threads) as pool:
        writer = SegmentWriter(segment, ChunkGrid(0, CHUNK_BYTES), pool)

        def publish(source: dict[str, Any]) -> None:
            futures: list[Future] = []
            for name, t in source.items():
                futures += writer.write(infos[name], tensor_source(t))
            for f in futures:
                f.result()

        ways = {"as_is": lambda: publish(state), "contiguous_first": lambda: publish({n: t.contiguous() for n, t in state.items()})}
        wall: dict[str, list[float]] = {way: [] for way in ways}
        cpu: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(args.rounds + 1):  # the first round warms up
            for way, run in ways.items():
                started, cpu_started = time.perf_counter(), time.process_time()
                run()
                wall[way].append((time.perf_counter() - started) * 1000)
                cpu[way].append((time.process_time() - cpu_started) * 1000)
        writer.close()
    figures: dict[str, Any] = {"mib": round(at / 2**20, 1), "rounds": args.rounds, "copy_threads": args.copy_threads}
    for way in ways:
        figures[f"{way}_wall_ms"] = round(statistics.median(wall[way][1:]), 1)
        figures[f"{way}_wall_min_ms"] = round(min(wall[way][1:]), 1)
        figures[f"{way}_cpu_ms"] = round(statistics.median(cpu[way][1:]), 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
