"""The bulk of a trajectory on the wire, as src/data/codec/payload.ts: token ids (int32) then
logprobs (float32), little endian, no framing (the lengths are in the metadata). A payload
larger than the server's max payload minus `HEADER_ROOM` is stored as chunks of that size."""

from __future__ import annotations

from typing import List, Sequence, Tuple, Union

import numpy as np

HEADER_ROOM = 16 * 1024
"""Room left in a message for its headers (the record's metadata): a header of every field at
its largest (ids, 4 KiB of info, 4 KiB of segments) fits. 8 KiB before segments."""

_I32 = np.dtype("<i4")
_F32 = np.dtype("<f4")

Buffer = Union[bytes, bytearray, memoryview]


def encode_payload(tokens: np.ndarray, logprobs: np.ndarray) -> bytes:
    """The payload of int32 token ids and float32 logprobs (any byte order in, little endian out)."""
    return tokens.astype(_I32, copy=False).tobytes() + logprobs.astype(_F32, copy=False).tobytes()


def decode_payload(data: Buffer, token_count: int) -> Tuple[np.ndarray, np.ndarray]:
    """Read-only int32 and float32 views of a payload (no copy)."""
    if len(data) != token_count * 8:
        raise ValueError(f"payload has {len(data)} bytes, expected {token_count * 8}")
    return (
        np.frombuffer(data, dtype=_I32, count=token_count),
        np.frombuffer(data, dtype=_F32, count=token_count, offset=token_count * 4),
    )


def chunk_limit(max_payload: int) -> int:
    """The largest payload a record carries in its body on a server with this max_payload;
    larger ones go in chunks of this size."""
    limit = max_payload - HEADER_ROOM
    if limit < 1:
        raise ValueError(f"the server's max_payload ({max_payload}) leaves no room beside {HEADER_ROOM} bytes of headers")
    return limit


def split_payload(payload: Buffer, limit: int) -> List[memoryview]:
    """The payload in chunks of `limit` bytes (the last one shorter), as views of it."""
    view = memoryview(payload)
    return [view[off : off + limit] for off in range(0, len(view), limit)]


def join_chunks(chunks: Sequence[Buffer], total: int) -> bytes:
    """Joins chunks (claim-check payloads) into one payload of `total` bytes."""
    out = b"".join(chunks)
    if len(out) != total:
        raise ValueError(f"chunks hold {len(out)} bytes, expected {total}")
    return out
