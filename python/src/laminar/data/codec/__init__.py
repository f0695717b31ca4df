"""The experience record format (v1, and v2 with segments: segments.py), byte for byte as the TypeScript side writes it:
validation of a writer's input (trajectory.py), the `Laminar-Meta` header (record_meta.py,
packed by msgpack_js.py), the int32/float32 payload and its chunks (payload.py). Pure
functions, no I/O: test/vectors/trajectories.json checks them against the TypeScript encoder."""

from .payload import HEADER_ROOM, chunk_limit, decode_payload, encode_payload, join_chunks, split_payload
from .record_meta import META_HEADER, RECORD_VERSION, decode_meta, encode_meta, meta_of, trajectory_of
from .trajectory import MAX_INFO_BYTES, Trajectory, check_payload_size, payload_bytes, validate_trajectory
from .segments import ACTION_STATUSES, MAX_SEGMENT_BYTES, MAX_SEGMENTS, Segment, loss_mask_of, turn_boundaries_of, validate_segments
from .builder import TrajectoryBuilder

__all__ = [
    "ACTION_STATUSES",
    "HEADER_ROOM",
    "MAX_SEGMENT_BYTES",
    "MAX_SEGMENTS",
    "Segment",
    "TrajectoryBuilder",
    "loss_mask_of",
    "turn_boundaries_of",
    "validate_segments",
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
