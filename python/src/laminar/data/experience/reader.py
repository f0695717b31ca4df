"""Reads one stored trajectory back by id: its record, and its chunks when it has any. For
tools and tests that look into a buffer (what did a writer store?); a trainer samples batches
through the sampler instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from nats.aio.client import Client as NATS

from ..codec.payload import decode_payload, join_chunks
from ..codec.record_meta import META_HEADER, decode_meta, trajectory_of
from ..codec.trajectory import Trajectory
from ..errors import CorruptRecordError
from .jetstream import direct_get
from .stream import buffer_names


@dataclass(frozen=True)
class StoredRecord:
    """A trajectory as the buffer holds it."""

    seq: int
    """Stream sequence of the record."""
    trajectory: Trajectory
    """Tokens and logprobs are read-only views of the received payload."""
    chunk_seqs: List[int]
    """Stream sequences of the payload's chunks (empty: the payload is the record's body)."""
    meta_header: str
    """The `Laminar-Meta` header as stored."""


async def read_record(nc: NATS, id: str, buffer: str = "default", *, timeout: float = 5.0) -> Optional[StoredRecord]:
    """The record of trajectory `id` in `buffer`, None when the buffer does not hold it.
    Raises `CorruptRecordError` for a record that is not a valid v1 record."""
    names = buffer_names(buffer)
    msg = await direct_get(nc, names.stream, last_by_subj=names.record_subject(id), timeout=timeout)
    if msg is None:
        return None
    header = msg.headers.get(META_HEADER)
    if header is None:
        raise CorruptRecordError(f"record {msg.seq} has no {META_HEADER} header", {"seq": msg.seq})
    meta = decode_meta(header)
    payload = msg.data or b""
    if meta["chunkSeqs"]:
        chunks = []
        for seq in meta["chunkSeqs"]:
            chunk = await direct_get(nc, names.stream, seq=seq, timeout=timeout)
            if chunk is None or chunk.subject != names.chunk_subject(id):
                raise CorruptRecordError(f"record {msg.seq} names chunk {seq}, which is not one of its chunks", {"seq": msg.seq, "chunk": seq})
            chunks.append(chunk.data)
        try:
            payload = join_chunks(chunks, meta["bytes"])
        except ValueError as err:
            raise CorruptRecordError(f"record {msg.seq}: {err}", {"seq": msg.seq}) from err
    try:
        tokens, logprobs = decode_payload(payload, meta["tokenCount"])
    except ValueError as err:
        raise CorruptRecordError(f"record {msg.seq}: {err}", {"seq": msg.seq}) from err
    return StoredRecord(seq=msg.seq, trajectory=trajectory_of(meta, tokens, logprobs), chunk_seqs=meta["chunkSeqs"], meta_header=header)
