"""XXH3-64 checksums as the relay writes them: seed 0, 16 lowercase hex digits."""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any, Sequence

import xxhash


def xxh3_hex(data: Any) -> str:
    """The checksum of a buffer (bytes, memoryview, contiguous numpy array). xxhash releases the
    GIL while it hashes a large buffer, so several threads hash at once."""
    return format(xxhash.xxh3_64_intdigest(data), "016x")


def checksum_ranges(data: Any, ranges: Sequence[tuple[int, int]], executor: Executor) -> list[str]:
    """The checksum of each ``(offset, length)`` range of ``data`` (a 1-D uint8 numpy array),
    computed on ``executor``'s threads, in the order of ``ranges``."""
    futures = [executor.submit(xxh3_hex, data[offset : offset + length]) for offset, length in ranges]
    return [f.result() for f in futures]
