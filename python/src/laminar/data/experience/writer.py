"""Writer of completed trajectories into the experience buffer, as
src/data/experience/writer.ts, from Python (nats-py, asyncio). A rollout calls `write()` once
per trajectory; it is validated (typed, counted rejections), then stored as one record message,
or as chunks and a record when the payload is larger than the server's max payload.

Duplicates: the record is published with the trajectory id as Nats-Msg-Id (the server drops a
repeat within the duplicate window) and with "expected last sequence on this subject = 0" (the
subject is per id, so a second record for an id stored in the buffer is refused at any time).
Both make `write()` idempotent, so it retries freely through a server restart, and a trajectory
written once from TypeScript and once from Python is stored once. Once the record has left the
buffer (trained on, evicted), its completion mark still answers `has()` for the completion horizon.
Both are read from the stream's leader (jetstream.py `leader_get`): a replica that lags would
say "not written" for a record the leader holds, and the sample would be generated again.

    writer = await ExperienceWriter.open(nc, buffer="main")
    result = await writer.write({"id": ..., "tokens": np_int32_array, ...})  # WriteResult(seq, duplicate, chunks)
"""

from __future__ import annotations

import asyncio
import inspect
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, List, Optional, TypeVar, Union

import nats.js.errors
from nats.aio.client import Client as NATS

from ... import error_codes
from ...errors import LaminarError
from ..codec.js_values import js_json_string, js_trim
from ..codec.payload import chunk_limit, encode_payload, split_payload
from ..codec.record_meta import META_HEADER, encode_meta, meta_of
from ..codec.trajectory import Trajectory, check_payload_size, validate_trajectory
from ..errors import DataCapacityError, DataInputError, StoreError
from ..rejections import RejectionCounter
from ..retry import DEFAULT_RETRY_FOR, retry_transient
from .jetstream import leader_get
from .stream import DEFAULT_DUPLICATE_WINDOW, BufferNames, chunk_msg_id, ensure_buffer_stream

T = TypeVar("T")

DEFAULT_MAX_TRAJECTORY_BYTES = 64 * 1024 * 1024
DEFAULT_CONCURRENCY = 64
"""Writes in flight in `write_many` (the TypeScript bench's window)."""

_GROUP_CACHE = 10_000
_WRONG_LAST_SEQUENCE = 10071
# JetStream's API error codes (err_code) for a write the buffer has no room for, as nats-server
# 2.15.1 answers them: 10077, the stream's store refused it at one of the stream's own limits with
# discard=new ("maximum bytes/messages [per subject] exceeded"); 10023, the server's JetStream
# storage is used up ("insufficient resources"); 10002, the account's JetStream limits are. The
# texts are for people and may change; the codes are the server's API (the TypeScript writer's
# BUFFER_FULL_API_CODES: the same).
BUFFER_FULL_API_CODES = frozenset({10077, 10023, 10002})

GroupSizes = Callable[[str], Union[Optional[int], Awaitable[Optional[int]]]]
"""Where a writer checks group ids: n of the group, or None when no such group was ever issued."""


@dataclass(frozen=True)
class WriteResult:
    seq: int
    """Stream sequence of the record."""
    duplicate: bool
    """The buffer already held this trajectory id; nothing was added."""
    chunks: int
    """Chunk messages the payload went into (0: in the record's body)."""


@dataclass
class WriterStats:
    """What a writer did (the TypeScript writer's laminar_buffer_* counters)."""

    written: int = 0
    duplicates: int = 0
    bytes: int = 0
    """Payload bytes of the trajectories written (duplicates not counted)."""
    chunked: int = 0
    """Trajectories stored claim-check style (payload in chunks)."""
    retries: int = 0
    """Publish attempts retried after a transient JetStream failure."""
    lost_acks: int = 0
    """Writes found stored after their acknowledgement was lost (counted as written, not duplicates)."""


def _msg_id(value: str) -> str:
    # nats.js trims header values and refuses CR and LF in them; the same id must give the same
    # Nats-Msg-Id from either language, and fail the same way.
    if "\r" in value or "\n" in value:
        raise StoreError("jetstream: header values cannot contain \\r or \\n", {"id": value})
    return js_trim(value)


class ExperienceWriter:
    """Validates trajectories and stores them in the experience buffer (see the module doc)."""

    def __init__(
        self,
        nc: NATS,
        names: BufferNames,
        *,
        max_trajectory_bytes: int,
        max_weight_version: Union[None, int, Callable[[], Optional[int]]],
        groups: Optional[GroupSizes],
        retry_for: float,
        timeout: float,
    ) -> None:
        """Use `ExperienceWriter.open`, which creates the stream when missing."""
        self.nc = nc
        self.names = names
        self.rejections = RejectionCounter()
        """Rejections by error code: ``writer.rejections[error_codes.LENGTH_MISMATCH]``."""
        self._stats = WriterStats()
        self._js = nc.jetstream(timeout=timeout)
        self._max_bytes = max_trajectory_bytes
        self._max_weight_version = max_weight_version
        self._groups = groups
        self._group_cache: "OrderedDict[str, int]" = OrderedDict()
        self._retry_for = retry_for
        self._timeout = timeout

    @classmethod
    async def open(
        cls,
        nc: NATS,
        buffer: str = "default",
        *,
        replicas: int = 1,
        max_stream_bytes: Optional[int] = None,
        duplicate_window: float = DEFAULT_DUPLICATE_WINDOW,
        max_trajectory_bytes: int = DEFAULT_MAX_TRAJECTORY_BYTES,
        max_weight_version: Union[None, int, Callable[[], Optional[int]]] = None,
        groups: Optional[GroupSizes] = None,
        retry_for: float = DEFAULT_RETRY_FOR,
        timeout: float = 5.0,
    ) -> "ExperienceWriter":
        """A writer on buffer `buffer` over the connected nats-py client `nc`; creates the
        buffer's stream when missing (the configuration ensureBufferStream gives it).

        :param replicas: stream replicas, applied when this call creates the stream.
        :param max_stream_bytes: hard ceiling on the stream's bytes (ERR_BUFFER_FULL beyond it).
        :param duplicate_window: seconds in which the server drops a re-published record.
        :param max_trajectory_bytes: largest payload (token and logprob bytes) accepted.
        :param max_weight_version: the newest weight version that exists, or a function that
            returns it; trajectories from later versions are rejected (ERR_FUTURE_VERSION).
        :param groups: ``group_size(group_id)`` (sync or async): when given, group ids must be
            known to it (ERR_UNKNOWN_GROUP) and group sizes must match (ERR_GROUP_MISMATCH).
        :param retry_for: seconds a write keeps retrying through a JetStream outage.
        :param timeout: seconds to wait for each acknowledgement.
        """
        if isinstance(max_trajectory_bytes, bool) or not isinstance(max_trajectory_bytes, int) or max_trajectory_bytes < 1:
            raise DataInputError(error_codes.BAD_DATA_OPTIONS, f"max_trajectory_bytes must be a positive integer, got {max_trajectory_bytes!r}")
        for name, value in (("retry_for", retry_for), ("timeout", timeout), ("duplicate_window", duplicate_window)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or (name != "retry_for" and value == 0):
                raise DataInputError(
                    error_codes.BAD_DATA_OPTIONS, f"{name} must be a {'non-negative' if name == 'retry_for' else 'positive'} number of seconds, got {value!r}"
                )
        try:
            names = await retry_transient(
                lambda: ensure_buffer_stream(
                    nc, buffer, replicas=replicas, max_stream_bytes=max_stream_bytes, duplicate_window=duplicate_window, timeout=timeout
                ),
                retry_for,
            )
        except LaminarError:
            raise
        except Exception as err:
            raise StoreError(f"jetstream: {err}", {"buffer": buffer}) from err
        return cls(
            nc,
            names,
            max_trajectory_bytes=max_trajectory_bytes,
            max_weight_version=max_weight_version,
            groups=groups,
            retry_for=retry_for,
            timeout=timeout,
        )

    def stats(self) -> WriterStats:
        """A copy of what this writer did so far."""
        return WriterStats(**vars(self._stats))

    async def write(self, trajectory: Union[Trajectory, Any]) -> WriteResult:
        """Validates and stores one completed trajectory: a `Trajectory` or a mapping (record
        or Python names). Raises `DataInputError` / `DataCapacityError` for bad input (counted
        in `rejections`), `DataCapacityError` ERR_BUFFER_FULL when the stream is at its limit,
        `StoreError` when JetStream fails for longer than `retry_for`."""
        try:
            t = validate_trajectory(trajectory, max_weight_version=self._newest_version())
            check_payload_size(t, self._max_bytes)
            if self._groups is not None:
                await self._check_group(t)
        except LaminarError as err:
            raise self.rejections.record(err) from None
        return await self._store(t)

    async def write_many(self, trajectories: Iterable[Union[Trajectory, Any]], concurrency: int = DEFAULT_CONCURRENCY) -> List[WriteResult]:
        """Writes trajectories with up to `concurrency` in flight (acknowledgements pipelined);
        results in input order. The first failure is raised once every write has finished."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise DataInputError(error_codes.BAD_DATA_OPTIONS, f"concurrency must be a positive integer, got {concurrency!r}")
        items = list(trajectories)
        results: List[Any] = [None] * len(items)
        next_index = 0

        async def lane() -> None:
            nonlocal next_index
            while next_index < len(items):
                i = next_index
                next_index += 1
                try:
                    results[i] = await self.write(items[i])
                except Exception as err:  # reported after the others finish
                    results[i] = err

        await asyncio.gather(*(lane() for _ in range(min(concurrency, len(items)))))
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results

    async def has(self, id: str) -> bool:
        """Whether this trajectory was written: its record is in the buffer, or left it (trained
        on, evicted) within the completion horizon (its completion mark). The record is read
        first: the sampler marks a trajectory completed before it removes the record."""
        if await self._last_record(self.names.record_subject(id)) is not None:
            return True
        done = self.names.done_subject(id)
        mark = await self._retry(lambda: leader_get(self.nc, self.names.done_stream, last_by_subj=done, timeout=self._timeout))
        return mark is not None

    def _newest_version(self) -> Optional[int]:
        m = self._max_weight_version
        return m() if callable(m) else m

    async def _check_group(self, t: Trajectory) -> None:
        n = self._group_cache.get(t.group_id)
        if n is None:
            found = self._groups(t.group_id)  # type: ignore[misc]
            if inspect.isawaitable(found):
                found = await found
            if found is None:
                raise DataInputError(error_codes.UNKNOWN_GROUP, f"unknown group id {js_json_string(t.group_id)}", {"id": t.id, "groupId": t.group_id})
            n = int(found)
            if len(self._group_cache) >= _GROUP_CACHE:
                self._group_cache.popitem(last=False)
            self._group_cache[t.group_id] = n
        if n != t.group_size:
            raise DataInputError(
                error_codes.GROUP_MISMATCH,
                f"group {t.group_id} has {n} samples, the trajectory says {t.group_size}",
                {"id": t.id, "groupId": t.group_id},
            )

    async def _store(self, t: Trajectory) -> WriteResult:
        payload = encode_payload(t.tokens, t.logprobs)
        try:
            limit = chunk_limit(self.nc.max_payload)
            msg_id = _msg_id(t.id)
        except (ValueError, StoreError) as err:
            raise self.rejections.record(err if isinstance(err, StoreError) else StoreError(str(err), {"buffer": self.names.buffer})) from None
        record_subject = self.names.record_subject(t.id)
        chunk_seqs: List[int] = []
        if len(payload) > limit:
            # Do not leave orphan chunks behind for a trajectory that is already stored.
            existing = await self._last_record(record_subject)
            if existing is not None:
                return self._counted(WriteResult(existing, True, 0), 0)
            chunk_subject = self.names.chunk_subject(t.id)
            for i, part in enumerate(split_payload(payload, limit)):
                headers = {"Nats-Msg-Id": _msg_id(chunk_msg_id(t.id, i))}
                body = bytes(part)
                ack = await self._retry(lambda: self._js.publish(chunk_subject, body, headers=headers))
                chunk_seqs.append(ack.seq)
            self._stats.chunked += 1
        meta = encode_meta(meta_of(t, chunk_seqs))
        headers = {META_HEADER: meta, "Nats-Msg-Id": msg_id, "Nats-Expected-Last-Subject-Sequence": "0"}
        body = b"" if chunk_seqs else payload
        attempts = 0

        async def publish() -> Any:
            nonlocal attempts
            attempts += 1
            return await self._js.publish(record_subject, body, headers=headers)

        ack = None
        try:
            ack = await self._retry(publish)
            if not ack.duplicate:
                return self._counted(WriteResult(ack.seq, False, len(chunk_seqs)), len(payload))
        except nats.js.errors.APIError as err:
            if err.err_code != _WRONG_LAST_SEQUENCE:
                raise
        # The buffer holds a record for this id. After a retried attempt whose acknowledgement
        # was lost (the server killed between storing and answering), it may be this write's
        # own: the stored metadata says so (the TypeScript writer decides the same way).
        stored = await self._retry(lambda: leader_get(self.nc, self.names.stream, last_by_subj=record_subject, timeout=self._timeout))
        if attempts > 1 and stored is not None and stored.headers.get(META_HEADER) == meta:
            self._stats.lost_acks += 1
            return self._counted(WriteResult(stored.seq, False, len(chunk_seqs)), len(payload))
        seq = stored.seq if stored is not None else (ack.seq if ack is not None else 0)
        return self._counted(WriteResult(seq, True, 0), 0)

    async def _last_record(self, subject: str) -> Optional[int]:
        """Sequence of the record on `subject` (as the stream's leader holds it), or None."""
        m = await self._retry(lambda: leader_get(self.nc, self.names.stream, last_by_subj=subject, timeout=self._timeout))
        return None if m is None else m.seq

    def _counted(self, r: WriteResult, size: int) -> WriteResult:
        if r.duplicate:
            self._stats.duplicates += 1
        else:
            self._stats.written += 1
            self._stats.bytes += size
        return r

    def _on_retry(self, _err: BaseException, _attempt: int) -> None:
        self._stats.retries += 1

    async def _retry(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Retries transport failures (retry.py); maps the server's answers to typed errors.
        A wrong-last-sequence answer (the record exists) goes to the caller as it is."""
        try:
            return await retry_transient(fn, self._retry_for, self._on_retry)
        except nats.js.errors.APIError as err:
            if err.err_code == _WRONG_LAST_SEQUENCE:
                raise
            description = err.description or str(err)
            if err.err_code in BUFFER_FULL_API_CODES:
                full = DataCapacityError(
                    error_codes.BUFFER_FULL, f"experience buffer {self.names.buffer} is full: {description}", {"buffer": self.names.buffer}
                )
                raise self.rejections.record(full) from err
            raise self.rejections.record(StoreError(f"jetstream: {description}", {"buffer": self.names.buffer})) from err
        except Exception as err:
            raise self.rejections.record(StoreError(f"jetstream: {err}", {"buffer": self.names.buffer})) from err
