"""The chunk grid of a version, as pure functions (the same rules as src/safetensors/header.ts).

A version's data section is cut into chunks of ``chunk_size`` bytes from ``data_offset`` on: the
unit of the relay's checksums and of the broadcast. A writer reports, for each tensor, one
XXH3-64 per part of the tensor in each chunk it spans (``chunk_aligned_parts``); the relay checks
those in the same read at commit that computes the chunk checksums.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkGrid:
    """Where chunks start: at ``data_offset`` and every ``chunk_size`` bytes after it."""

    data_offset: int
    chunk_size: int


def chunk_aligned_parts(grid: ChunkGrid, offset: int, length: int) -> list[tuple[int, int]]:
    """``[offset, offset + length)`` cut where it crosses a chunk boundary: ``(offset, length)`` of
    its parts in consecutive chunks, in order. An empty range is one empty part."""
    parts: list[tuple[int, int]] = []
    end = offset + length
    at = offset
    while True:
        chunk_end = grid.data_offset + ((at - grid.data_offset) // grid.chunk_size + 1) * grid.chunk_size
        part_end = min(end, chunk_end)
        parts.append((at, part_end - at))
        at = part_end
        if at >= end:
            return parts


def chunk_ranges(grid: ChunkGrid, data_length: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of every chunk of a data section of ``data_length`` bytes."""
    return [(grid.data_offset + begin, min(grid.chunk_size, data_length - begin)) for begin in range(0, data_length, grid.chunk_size)]
