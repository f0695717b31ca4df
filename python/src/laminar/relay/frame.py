"""Length-prefixed msgpack frames of the relay's local protocol, as a pure codec over bytes.

    [u32 big-endian payload length][payload: one msgpack value]

Nothing here touches a socket (the connection feeds the decoder whatever ``recv`` returned), so
the codec is tested byte by byte without a relay. The same rules as the TypeScript codec
(src/common/request-protocol/frame.ts): plain maps and arrays only, a length above ``max_frame_bytes`` is
refused before any of its payload is buffered, an empty frame is malformed.
"""

from __future__ import annotations

from typing import Any

import msgpack

from .. import error_codes
from ..errors import LaminarError

FRAME_HEADER_BYTES = 4
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024


def encode_frame(message: Any, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> bytes:
    """One frame holding ``message`` (str keys, ints, floats, str, bytes, lists, dicts)."""
    try:
        payload = msgpack.packb(message, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as err:
        raise LaminarError(error_codes.INVALID_ARG, f"cannot encode the message as msgpack: {err}") from err
    if len(payload) > max_frame_bytes:
        raise LaminarError(
            error_codes.FRAME_TOO_LARGE,
            f"message of {len(payload)} bytes exceeds the frame limit of {max_frame_bytes}",
        )
    return len(payload).to_bytes(FRAME_HEADER_BYTES, "big") + payload


def decode_payload(payload: bytes) -> Any:
    """The msgpack value of one frame's payload."""
    try:
        return msgpack.unpackb(payload, raw=False)
    except Exception as err:  # msgpack raises several unrelated types for bad input
        raise LaminarError(error_codes.BAD_FRAME, f"frame is not valid msgpack: {err}") from err


class FrameDecoder:
    """Cuts a byte stream into frame payloads, whatever the splits of what it is fed."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._max = max_frame_bytes
        self._buffer = bytearray()

    @property
    def pending_bytes(self) -> int:
        """Bytes held for an incomplete frame (at most ``max_frame_bytes`` + the header)."""
        return len(self._buffer)

    def push(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Feeds bytes; returns the payloads now complete. Raises LaminarError on a bad length."""
        buffer = self._buffer
        buffer += data
        out: list[bytes] = []
        at = 0
        try:
            while len(buffer) - at >= FRAME_HEADER_BYTES:
                length = int.from_bytes(buffer[at : at + FRAME_HEADER_BYTES], "big")
                if length > self._max:
                    raise LaminarError(
                        error_codes.FRAME_TOO_LARGE,
                        f"peer announced a frame of {length} bytes (limit {self._max})",
                    )
                if length == 0:
                    raise LaminarError(error_codes.BAD_FRAME, "empty frame")
                end = at + FRAME_HEADER_BYTES + length
                if len(buffer) < end:
                    break
                out.append(bytes(buffer[at + FRAME_HEADER_BYTES : end]))
                at = end
        finally:
            if at:
                del buffer[:at]
        return out
