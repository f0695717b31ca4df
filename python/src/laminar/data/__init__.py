"""Trajectories into the experience buffer (`ExperienceWriter`), byte-compatible with the
TypeScript side, and batches out of it for a Python trainer (`Sampler`, a client of the
TypeScript sampler service).

    from laminar.data import ExperienceWriter, Trajectory

    writer = await ExperienceWriter.open(nc, buffer="main")      # nc: a connected nats-py client
    await writer.write(Trajectory(id=..., prompt_id=..., ..., tokens=ids, logprobs=lps))

Each submodule's names are imported on a line of its own, so that modules added beside them
(the sampler's client) extend this list without touching the others.
"""

from .codec import Trajectory, validate_trajectory
from .codec import TrajectoryBuilder, loss_mask_of, turn_boundaries_of
from .errors import CorruptRecordError, DataCapacityError, DataInputError, StoreError
from .experience import (
    ExperienceWriter,
    StoredRecord,
    SyncExperienceWriter,
    WriteResult,
    WriterStats,
    buffer_names,
    read_record,
)
from .rejections import RejectionCounter
from .sampler import Batch, BatchItem, Sampler, default_socket_path

__all__ = [
    "Batch",
    "BatchItem",
    "Sampler",
    "default_socket_path",
    "CorruptRecordError",
    "DataCapacityError",
    "DataInputError",
    "ExperienceWriter",
    "RejectionCounter",
    "StoreError",
    "StoredRecord",
    "SyncExperienceWriter",
    "Trajectory",
    "TrajectoryBuilder",
    "WriteResult",
    "WriterStats",
    "buffer_names",
    "loss_mask_of",
    "read_record",
    "turn_boundaries_of",
    "validate_trajectory",
]
