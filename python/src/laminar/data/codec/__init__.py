"""The experience record format (v1), byte for byte as the TypeScript side writes it:
validation of a writer's input (trajectory.py), the `Laminar-Meta` header (record_meta.py,
packed by msgpack_js.py), the int32/float32 payload and its chunks (payload.py). Pure
functions, no I/O: test/vectors/trajectories.json checks them against the TypeScript encoder."""

from .payload import HEADER_ROOM, chunk_limit, decode_payload, encode_payload, join_chunks, split_payload
from .record_meta import META_HEADER, RECORD_VERSION, decode_meta, encode_meta, meta_of, trajectory_of
from .trajectory import MAX_INFO_BYTES, Trajectory, check_payload_size, payload_bytes, validate_trajectory

__all__ = [
    "HEADER_ROOM",
    "MAX_INFO_BYTES",
    "META_HEADER",
    "RECORD_VERSION",
    "Trajectory",
    "check_payload_size",
    "chunk_limit",
    "decode_meta",
    "decode_payload",
    "encode_meta",
    "encode_payload",
    "join_chunks",
    "meta_of",
    "payload_bytes",
    "split_payload",
    "trajectory_of",
    "validate_trajectory",
]
