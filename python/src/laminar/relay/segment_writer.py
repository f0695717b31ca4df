"""Copying tensors into a segment mapped writable, checksummed as the relay checks them.

Each tensor is cut into its parts in the chunks it spans (``chunk_aligned_parts``); each part is
one job on a thread pool that copies it a block at a time and hashes each block right after
copying it, while the block is still in cache: one read of the source, one write of the segment,
the hash from cache. numpy's ``copyto``, torch's ``copy_`` and xxhash release the GIL on big
buffers, so the jobs run in parallel. A job returns the part's XXH3-64 as 16 hex digits: what
the TypeScript client reports in ``written`` (``chunkAligned: true``).

A tensor that is not contiguous is copied whole into its place by one job of the pool, straight
from its strides (strided_copy.py), then checksummed: no contiguous copy of it is made first, and
the caller's thread goes on handing out the other tensors' copies meanwhile.

Small single-part tensors are copied on the caller's thread: handing them to the pool costs more
than the copy.
"""

from __future__ import annotations

import mmap
from concurrent.futures import Executor, Future
from typing import Any, Callable, Optional

import numpy as np
import xxhash

from .checksums import xxh3_hex
from .layout import ChunkGrid, chunk_aligned_parts
from .protocol import TensorInfo
from .strided_copy import copy_strided
from .tensor_source import TensorSource

#: Bytes copied, then hashed, at a time: small enough that the hash reads them from the core's
#: cache (L2 is 512 KiB a core on the development VM; L3 holds the rest), large enough that
#: Python's per-block overhead (~5 us) stays under 1% of the copy. Measured in
#: bench/python/relay_bench.py --block-bytes.
BLOCK_BYTES = 1024 * 1024
#: A tensor of one part up to this size is written on the caller's thread.
INLINE_BYTES = 256 * 1024


def _done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


def _run_inline(fn: Callable[[], Any]) -> Future:
    future: Future = Future()
    try:
        future.set_result(fn())
    except BaseException as err:  # noqa: BLE001 - delivered through the future, like the pool's
        future.set_exception(err)
    return future


class SegmentWriter:
    """Writes and checksums tensors of one segment; ``close()`` drops its view of the mapping."""

    def __init__(self, mapping: mmap.mmap, grid: ChunkGrid, executor: Executor, block_bytes: Optional[int] = None) -> None:
        self._bytes: Optional[np.ndarray] = np.frombuffer(mapping, np.uint8)
        self._grid = grid
        self._executor = executor
        self._block = block_bytes or BLOCK_BYTES

    @property
    def bytes(self) -> np.ndarray:
        """The whole segment as a writable 1-D uint8 array."""
        if self._bytes is None:
            raise RuntimeError("the segment writer is closed")
        return self._bytes

    def close(self) -> None:
        self._bytes = None

    def write(self, info: TensorInfo, source: TensorSource) -> list[Future]:
        """Starts copying ``source`` into ``info``'s place; one future per part, each resolving to
        the part's checksum. ``source`` must not change until they resolve."""
        parts = chunk_aligned_parts(self._grid, info.offset, info.byte_length)
        if source.host is not None:
            host = source.host
            jobs = [(lambda o=o, n=n: self._copy_part(o, host, o - info.offset, n)) for o, n in parts]
            if len(parts) == 1 and info.byte_length <= INLINE_BYTES:
                return [_run_inline(jobs[0])]
            return [self._executor.submit(job) for job in jobs]
        if source.strided is not None:
            return self._write_strided(info, source.strided, parts)
        device = source.device
        return [self._executor.submit(self._copy_device_part, o, device, o - info.offset, n) for o, n in parts]

    def checksum(self, info: TensorInfo) -> list[Future]:
        """Checksums ``info``'s parts as they are in the segment (after an in-place fill)."""
        parts = chunk_aligned_parts(self._grid, info.offset, info.byte_length)
        data = self.bytes
        if len(parts) == 1 and info.byte_length <= INLINE_BYTES:
            return [_done(xxh3_hex(data[info.offset : info.offset + info.byte_length]))]
        return [self._executor.submit(xxh3_hex, data[o : o + n]) for o, n in parts]

    def _write_strided(self, info: TensorInfo, source: Any, parts: list[tuple[int, int]]) -> list[Future]:
        """A tensor that is not contiguous: one copy of the whole of it into its place, on the
        pool (the other tensors' copies go on meanwhile; the caller's thread only hands it
        over), then its parts' checksums in the same job. One future per part, as ``write``."""
        results: list[Future] = [Future() for _ in parts]

        def job() -> None:
            try:
                data = self.bytes
                copy_strided(data[info.offset : info.offset + info.byte_length], source)
                for (offset, length), result in zip(parts, results):
                    result.set_result(xxh3_hex(data[offset : offset + length]))
            except BaseException as err:  # noqa: BLE001 - delivered through the futures
                for result in results:
                    if not result.done():
                        result.set_exception(err)

        if len(parts) == 1 and info.byte_length <= INLINE_BYTES:
            job()
        else:
            self._executor.submit(job)
        return results

    def _copy_part(self, offset: int, source: np.ndarray, source_offset: int, length: int) -> str:
        data = self.bytes
        state = xxhash.xxh3_64()
        block = self._block
        end = offset + length
        delta = source_offset - offset
        for at in range(offset, end, block):
            stop = min(at + block, end)
            target = data[at:stop]
            np.copyto(target, source[at + delta : stop + delta])
            state.update(target)
        return format(state.intdigest(), "016x")

    def _copy_device_part(self, offset: int, source: Any, source_offset: int, length: int) -> str:
        import torch

        target = self.bytes[offset : offset + length]
        if length > 0:
            torch.from_numpy(target).copy_(source[source_offset : source_offset + length])
        return xxh3_hex(target)
