"""The experience buffer's JetStream stream, as src/data/experience/stream.ts: file storage,
one record message per trajectory on ``laminar.exp.<buffer>.t.<idToken(id)>`` (metadata in a
header, payload in the body) and, for payloads larger than the server's max payload, chunk
messages on ``laminar.exp.<buffer>.c.<idToken(id)>`` published before the record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

import nats.js.errors
from nats.aio.client import Client as NATS

from ... import error_codes
from ..errors import DataInputError, StoreError
from ..ids import check_name, id_token
from .jetstream import api_request

DEFAULT_DUPLICATE_WINDOW = 120.0
"""Seconds in which the server drops a re-published record by its id."""

_STREAM_NOT_FOUND = 10059


@dataclass(frozen=True)
class BufferNames:
    """The stream and subjects of one buffer."""

    buffer: str
    stream: str
    record_prefix: str
    chunk_prefix: str
    record_filter: str
    all_filter: str
    """Every subject of the buffer: records and chunks."""

    def record_subject(self, id: str) -> str:
        return f"{self.record_prefix}.{id_token(id)}"

    def chunk_subject(self, id: str) -> str:
        return f"{self.chunk_prefix}.{id_token(id)}"


def buffer_names(buffer: str = "default") -> BufferNames:
    """The names of a buffer (ERR_BAD_DATA_OPTIONS for a name that cannot be part of them)."""
    check_name("buffer", buffer)
    record_prefix = f"laminar.exp.{buffer}.t"
    chunk_prefix = f"laminar.exp.{buffer}.c"
    return BufferNames(
        buffer=buffer,
        stream=f"LAMINAR_EXP_{buffer}",
        record_prefix=record_prefix,
        chunk_prefix=chunk_prefix,
        record_filter=f"{record_prefix}.*",
        all_filter=f"laminar.exp.{buffer}.>",
    )


def chunk_msg_id(id: str, i: int) -> str:
    """Nats-Msg-Id of a trajectory's chunk `i`: a re-published chunk is dropped inside the duplicate window."""
    return f"{id}\u0000c{i}"


def stream_config(
    names: BufferNames, *, replicas: int = 1, max_stream_bytes: Optional[int] = None, duplicate_window: float = DEFAULT_DUPLICATE_WINDOW
) -> Dict[str, Any]:
    """The stream's configuration, the same as ensureBufferStream creates."""
    return {
        "name": names.stream,
        "subjects": [names.all_filter],
        "storage": "file",
        "retention": "limits",
        "discard": "new",
        "max_bytes": -1 if max_stream_bytes is None else max_stream_bytes,
        "num_replicas": replicas,
        "duplicate_window": int(round(duplicate_window * 1e9)),
        # Direct get: the sampler reads records by sequence without the JSON API's base64.
        "allow_direct": True,
    }


async def ensure_buffer_stream(
    nc: NATS,
    buffer: str = "default",
    *,
    replicas: int = 1,
    max_stream_bytes: Optional[int] = None,
    duplicate_window: float = DEFAULT_DUPLICATE_WINDOW,
    timeout: float = 5.0,
) -> BufferNames:
    """Creates the buffer's stream when missing; an existing stream is used as it is.

    :param replicas: 1 on a single server, 3 on a NATS cluster (R3); applied at creation.
    :param max_stream_bytes: hard ceiling on stored bytes: beyond it writers get
        ERR_BUFFER_FULL (back-pressure), never a silent drop. Default: unlimited.
    :param duplicate_window: seconds in which the server drops re-published records by id.
    """
    names = buffer_names(buffer)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 5:
        raise DataInputError(error_codes.BAD_DATA_OPTIONS, f"replicas must be 1..5, got {replicas!r}")
    try:
        await api_request(nc, f"STREAM.INFO.{names.stream}", None, timeout)
        return names
    except nats.js.errors.APIError as err:
        if err.err_code != _STREAM_NOT_FOUND:
            raise StoreError(f"jetstream: {err.description}") from err
    config = stream_config(names, replicas=replicas, max_stream_bytes=max_stream_bytes, duplicate_window=duplicate_window)
    try:
        await api_request(nc, f"STREAM.CREATE.{names.stream}", config, timeout)
    except nats.js.errors.APIError as err:
        # Another writer or sampler created it at the same moment.
        if "already in use" not in (err.description or "") and "already exists" not in (err.description or ""):
            raise StoreError(f"jetstream: cannot create {names.stream}: {err.description}") from err
    return names
