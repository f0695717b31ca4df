"""The Python client's weight path against a running relay; prints ONE JSON line on stdout.

    .venv/bin/python bench/python/relay_bench.py --socket /dev/shm/laminar/relay.sock \
        [--size-bytes 1073741824] [--tensors 16] [--rounds 5] [--copy-threads N] [--block-bytes B]

Figures (medians of --rounds):
- py_acquire_ms: acquire the latest version -> a dict of numpy views of every tensor;
- py_torch_views_ms: the same -> a dict of torch tensors;
- py_read_over_memcpy: numpy copies of every tensor out of a fresh lease into private memory,
  against the same copies from a private buffer of the same size (same threads): the raw limit,
  measured in the same run;
- py_publish_stall_ms: a trainer's stall publishing a state dict of --tensors tensors (torch
  bfloat16, numpy without torch) of --size-bytes in all: the copies into the segment (with their
  checksums) and the commit sent; the relay's begin before them is timed apart (py_begin_ms), as
  the TypeScript bench does; py_publish_ms is the whole ``publish()`` call, begin included;
  py_commit_ms the commit call alone, py_visible_ms from the commit sent to the version verified
  and served (waited for out of the stall, before the next round).
Versions go on from the newest the relay holds of the model, so runs may repeat on one relay.
bench/python.ts starts the relay, runs the TypeScript client's publish of the same tensors and
this script, and prints the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python" / "src"))

from laminar import RelayClient  # noqa: E402
from laminar.relay import segment_map, segment_writer  # noqa: E402

try:
    import torch
except ImportError:  # the numpy figures still mean something
    torch = None


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1e3, 3)


def make_tensors(count: int, tensor_bytes: int) -> dict:
    """Distinct pseudo-random contents, so that a misplaced tensor would fail the checksums."""
    base = np.random.default_rng(7).integers(0, 256, tensor_bytes + 4096 * count, dtype=np.uint8)
    tensors = {}
    for i in range(count):
        data = base[i * 4096 : i * 4096 + tensor_bytes].copy()
        if torch is not None:
            tensors[f"layer.{i}.weight"] = torch.from_numpy(data).view(torch.bfloat16)
        else:
            tensors[f"layer.{i}.weight"] = data.view(np.uint16)
    return tensors


def copy_all(pool: ThreadPoolExecutor, pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
    list(pool.map(lambda p: np.copyto(p[0], p[1]), pairs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", required=True, help="the relay's socket")
    parser.add_argument("--size-bytes", type=int, default=1 << 30)
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default="bench/python")
    parser.add_argument("--copy-threads", type=int, default=None, help="the client's copy threads (default: its own)")
    parser.add_argument("--block-bytes", type=int, default=None, help="bytes copied then hashed at a time")
    args = parser.parse_args()
    if args.block_bytes:
        segment_writer.BLOCK_BYTES = args.block_bytes

    tensor_bytes = args.size_bytes // args.tensors // 4096 * 4096
    tensors = make_tensors(args.tensors, tensor_bytes)
    client = RelayClient(args.socket, name="python bench", copy_threads=args.copy_threads)
    threads = client.copy_threads
    held = [v["version"] for v in client.status()["versions"] if v["model"] == args.model]
    version = max(held, default=0)

    # Publish: begin apart, then the stall (copies with checksums + commit).
    begin_s, write_s, commit_s, stall_s, whole_s, visible_s = [], [], [], [], [], []
    for _ in range(args.rounds):
        version += 1
        t0 = time.perf_counter()
        publication = client.begin(args.model, version, [(n, t.dtype, t.shape) for n, t in tensors.items()])
        t1 = time.perf_counter()
        publication.write_many(tensors)
        t2 = time.perf_counter()
        result = publication.commit()
        t3 = time.perf_counter()
        begin_s.append(t1 - t0)
        write_s.append(t2 - t1)
        commit_s.append(t3 - t2)
        stall_s.append(t3 - t1)
        result.wait_visible()
        visible_s.append(result.visible_seconds)
    for _ in range(args.rounds):
        version += 1
        t0 = time.perf_counter()
        result = client.publish(args.model, version, tensors)
        whole_s.append(time.perf_counter() - t0)
        result.wait_visible()

    # Acquire -> views, once the publications' own unmapping (on a background thread, holding
    # this process's address space) is over: what a rollout process that does not publish sees.
    segment_map.wait_for_unmaps()
    acquire_s, torch_s = [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        lease = client.acquire(args.model)
        views = lease.numpy()
        acquire_s.append(time.perf_counter() - t0)
        del views
        lease.release()
        if torch is not None:
            t0 = time.perf_counter()
            lease = client.acquire(args.model)
            views = lease.torch()
            torch_s.append(time.perf_counter() - t0)
            del views
            lease.release()

    # Reading every tensor out of a fresh lease, against the same copies from private memory: the
    # published tensors themselves (private, faulted in) into one destination (faulted in first).
    pool = ThreadPoolExecutor(threads)
    data_bytes = tensor_bytes * args.tensors
    private = [t.view(torch.uint8).numpy() if torch is not None else t.view(np.uint8) for t in tensors.values()]
    target = np.zeros(data_bytes, np.uint8)
    targets = [target[i * tensor_bytes : (i + 1) * tensor_bytes] for i in range(args.tensors)]
    memcpy_s, read_s = [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        copy_all(pool, list(zip(targets, private)))
        memcpy_s.append(time.perf_counter() - t0)
        lease = client.acquire(args.model)
        views = lease.numpy()
        t0 = time.perf_counter()
        copy_all(pool, [(t.view(v.dtype).reshape(v.shape), v) for t, v in zip(targets, views.values())])
        read_s.append(time.perf_counter() - t0)
        del views
        lease.release()
    pool.shutdown()
    client.close()

    result = {
        "bench": "python-relay",
        "size_bytes": data_bytes,
        "tensors": args.tensors,
        "rounds": args.rounds,
        "copy_threads": threads,
        "block_bytes": segment_writer.BLOCK_BYTES,
        "torch": torch.__version__ if torch is not None else None,
        "py_acquire_ms": median_ms(acquire_s),
        "py_torch_views_ms": median_ms(torch_s) if torch_s else None,
        "py_read_over_memcpy": round(statistics.median(memcpy_s) / statistics.median(read_s), 3),
        "py_read_GBps": round(data_bytes / statistics.median(read_s) / 1e9, 2),
        "memcpy_GBps": round(data_bytes / statistics.median(memcpy_s) / 1e9, 2),
        "py_begin_ms": median_ms(begin_s),
        "py_write_ms": median_ms(write_s),
        "py_commit_ms": median_ms(commit_s),
        "py_publish_stall_ms": median_ms(stall_s),
        "py_publish_ms": median_ms(whole_s),
        "py_visible_ms": median_ms(visible_s),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
