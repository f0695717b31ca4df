"""The experience buffer's JetStream stream, as src/data/experience/stream.ts: file storage,
one record message per trajectory on ``laminar.exp.<buffer>.t.<idToken(id)>`` (metadata in a
header, payload in the body) and, for payloads larger than the server's max payload, chunk
messages on ``laminar.exp.<buffer>.c.<idToken(id)>`` published before the record.

Beside it, the buffer's completion marks (src/data/experience/completion-marks.ts): one empty
message per trajectory on ``laminar.expdone.<buffer>.<idToken(id)>``, published by the sampler
when the record leaves the buffer (trained on or evicted) and kept for the completion horizon."""

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

DEFAULT_COMPLETION_HORIZON = 30 * 60.0
"""Seconds a trajectory whose record left the buffer is still known as completed."""

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
    done_stream: str
    """The completion marks' stream."""
    done_prefix: str
    done_filter: str

    def record_subject(self, id: str) -> str:
        return f"{self.record_prefix}.{id_token(id)}"

    def chunk_subject(self, id: str) -> str:
        return f"{self.chunk_prefix}.{id_token(id)}"

    def done_subject(self, id: str) -> str:
        return f"{self.done_prefix}.{id_token(id)}"


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
        # Outside ``laminar.exp.<buffer>.>``: two streams cannot share a subject.
        done_stream=f"LAMINAR_EXPDONE_{buffer}",
        done_prefix=f"laminar.expdone.{buffer}",
        done_filter=f"laminar.expdone.{buffer}.*",
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


def completion_stream_config(names: BufferNames, *, replicas: int = 1, horizon: float = DEFAULT_COMPLETION_HORIZON) -> Dict[str, Any]:
    """The completion marks' stream, the same as ensureBufferStream creates: the server expires
    each mark after `horizon` seconds; one mark per trajectory."""
    if not horizon >= 1.0:
        raise DataInputError(error_codes.BAD_DATA_OPTIONS, f"the completion horizon must be at least 1 s, got {horizon} s")
    return {
        "name": names.done_stream,
        "subjects": [names.done_filter],
        "storage": "file",
        "retention": "limits",
        "discard": "old",
        "max_age": int(round(horizon * 1000)) * 1_000_000,
        "max_msgs_per_subject": 1,
        "num_replicas": replicas,
        "duplicate_window": int(round(min(120.0, horizon) * 1000)) * 1_000_000,
        "allow_direct": True,
    }


async def ensure_buffer_stream(
    nc: NATS,
    buffer: str = "default",
    *,
    replicas: int = 1,
    max_stream_bytes: Optional[int] = None,
    duplicate_window: float = DEFAULT_DUPLICATE_WINDOW,
    completion_horizon: float = DEFAULT_COMPLETION_HORIZON,
    timeout: float = 5.0,
) -> BufferNames:
    """Creates the buffer's stream and its completion marks' stream when missing; an existing
    stream is used as it is.

    :param replicas: 1 on a single server, 3 on a NATS cluster (R3); applied at creation.
    :param max_stream_bytes: hard ceiling on stored bytes: beyond it writers get
        ERR_BUFFER_FULL (back-pressure), never a silent drop. Default: unlimited.
    :param duplicate_window: seconds in which the server drops re-published records by id.
    :param completion_horizon: seconds a trajectory whose record left the buffer is still known
        as completed; applied at creation.
    """
    names = buffer_names(buffer)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 5:
        raise DataInputError(error_codes.BAD_DATA_OPTIONS, f"replicas must be 1..5, got {replicas!r}")
    await _ensure_stream(nc, stream_config(names, replicas=replicas, max_stream_bytes=max_stream_bytes, duplicate_window=duplicate_window), timeout)
    await _ensure_stream(nc, completion_stream_config(names, replicas=replicas, horizon=completion_horizon), timeout)
    return names


async def _ensure_stream(nc: NATS, config: Dict[str, Any], timeout: float) -> None:
    name = config["name"]
    try:
        await api_request(nc, f"STREAM.INFO.{name}", None, timeout)
        return
    except nats.js.errors.APIError as err:
        if err.err_code != _STREAM_NOT_FOUND:
            raise StoreError(f"jetstream: {err.description}") from err
    try:
        await api_request(nc, f"STREAM.CREATE.{name}", config, timeout)
    except nats.js.errors.APIError as err:
        # Another writer or sampler created it at the same moment.
        if "already in use" not in (err.description or "") and "already exists" not in (err.description or ""):
            raise StoreError(f"jetstream: cannot create {name}: {err.description}") from err
