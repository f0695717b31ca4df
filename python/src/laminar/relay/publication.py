"""Writing one version in place.

The relay lays the version out (``begin``) and hands back the segment; the writer maps it and
copies each tensor into its place (nothing but names and checksums crosses the socket). Each
write is reported to the relay with one XXH3-64 per part of the tensor in each chunk it spans,
computed while copying; at commit the relay checks those against the segment before it serves
the version. Several writers, in several processes, may fill disjoint tensors of one
publication: the first ``begin``s it and shares ``segment``, the others ``attach`` to it, each
``flush``es (or ``close``s) when its part is written, and the first ``commit``s.

``commit`` returns as soon as the reports and the commit request are sent: the writer's stall is
the copy. The relay's read runs after, and the returned ``PublishResult`` says when the version
is verified and served (``wait_visible``), or why it never will be.
"""

from __future__ import annotations

import mmap
import threading
import time
import warnings
from concurrent.futures import Executor, Future
from typing import Any, Iterable, Mapping, Optional, Union

import numpy as np

from .. import error_codes
from ..errors import ClosedError, LaminarError
from .connection import FrameConnection
from .dtypes import DTYPE_SIZES, fills, numpy_view_dtype, torch_view_dtype
from .layout import ChunkGrid
from .protocol import TensorInfo, tensor_index
from .publish_result import PublishResult
from .segment_map import close_mapping_later
from .segment_writer import SegmentWriter
from .tensor_source import TensorSource, tensor_source

Tensors = Union[Mapping[str, Any], Iterable[tuple[str, Any]]]


class Publication:
    """A version being written. Use it as a context manager: an exception inside aborts it;
    leaving without a commit aborts it when this writer began it (``owner``) and closes this
    writer's part otherwise."""

    def __init__(self, connection: FrameConnection, description: Mapping[str, Any], mapping: mmap.mmap, owner: bool, executor: Executor) -> None:
        self._connection = connection
        #: The relay's description of the segment (``begin``/``attach`` result), as sent.
        self.description = dict(description)
        self.model: str = description["model"]
        self.version: int = int(description["version"])
        #: The segment's name: what other writers ``attach`` to.
        self.segment: str = description["segment"]
        self.path: str = description["path"]
        self.size: int = int(description["size"])
        #: Whether this writer began the publication (only the owner commits or aborts it).
        self.owner = owner
        #: The tensors of the version, by name, in segment order.
        self.tensors: dict[str, TensorInfo] = tensor_index(description)
        self._mapping: Optional[mmap.mmap] = mapping
        self._writer = SegmentWriter(mapping, ChunkGrid(int(description["dataOffset"]), int(description["chunkSize"])), executor)
        self._lock = threading.Lock()
        self._reports: list[tuple[str, list[Future]]] = []
        self._finished = False

    def __repr__(self) -> str:
        return f"Publication({self.model!r}, v{self.version}, {len(self.tensors)} tensors, owner={self.owner})"

    def info(self, name: str) -> TensorInfo:
        """Where tensor ``name`` lies; ``UNKNOWN_TENSOR`` when the version has none of that name."""
        t = self.tensors.get(name)
        if t is None:
            raise LaminarError(error_codes.UNKNOWN_TENSOR, f"version {self.version} of {self.model} has no tensor {name!r}")
        return t

    @property
    def finished(self) -> bool:
        """True after commit, abort or close."""
        return self._finished

    # -- writing ---------------------------------------------------------------------------

    def write(self, name: str, tensor: Any) -> None:
        """Copies ``tensor`` (torch tensor on any device, numpy array, or bytes) into tensor
        ``name`` and records its checksums; returns once the bytes are in the segment, so the
        caller may reuse ``tensor`` at once. Reported to the relay at the next flush/commit."""
        info, source = self._prepare(name, tensor)
        futures = self._writer.write(info, source)
        self._add_report(name, [_resolved(f) for f in _wait_all(futures)])

    def write_many(self, tensors: Tensors) -> None:
        """Writes several tensors at once (a mapping of name to tensor, or ``(name, tensor)``
        pairs): every copy is in flight on the thread pool together. Returns once all are in the
        segment."""
        items = tensors.items() if isinstance(tensors, Mapping) else tensors
        started: list[tuple[str, list[Future]]] = []
        try:
            for name, tensor in items:
                info, source = self._prepare(name, tensor)
                started.append((name, self._writer.write(info, source)))
        finally:
            # Even when one failed, the copies started must end before anyone unmaps.
            for _, futures in started:
                _wait_all(futures)
        for name, futures in started:
            self._add_report(name, [_resolved(f) for f in futures])

    def numpy(self, name: str) -> np.ndarray:
        """A writable numpy view of tensor ``name`` in the segment, to fill in place (then call
        ``mark_written``). BF16 is viewed as uint16 and F8_* as uint8."""
        self._check_open()
        t = self.info(name)
        dtype = numpy_view_dtype(t.dtype)
        return np.frombuffer(self._live_mapping(), dtype, t.byte_length // dtype.itemsize, t.offset).reshape(t.shape)

    def tensor(self, name: str) -> Any:
        """A writable CPU torch tensor over tensor ``name`` in the segment, to fill in place (then
        call ``mark_written``)."""
        import torch

        self._check_open()
        t = self.info(name)
        dtype = torch_view_dtype(t.dtype)
        count = t.byte_length // DTYPE_SIZES[t.dtype]
        if count == 0:
            return torch.empty(t.shape, dtype=dtype)
        return torch.frombuffer(self._live_mapping(), dtype=dtype, count=count, offset=t.offset).view(t.shape)

    def mark_written(self, name: str) -> None:
        """Declares tensor ``name`` filled in place (through ``numpy``/``tensor``): its checksums
        are computed from the segment."""
        self._check_open()
        self._add_report(name, self._writer.checksum(self.info(name)))

    # -- the relay's side -------------------------------------------------------------------

    def flush(self) -> None:
        """Reports the tensors written since the last flush to the relay (commit does this too;
        an attached writer does it, or ``close``, before the owner commits)."""
        with self._lock:
            reports, self._reports = self._reports, []
        if not reports:
            return
        tensors = [{"name": name, "chunkAligned": True, "pieces": [f.result() for f in futures]} for name, futures in reports]
        self._connection.request("written", {"model": self.model, "version": self.version, "tensors": tensors})

    def commit(self) -> PublishResult:
        """Reports what was written and asks the relay to commit; returns as soon as that is sent,
        with a ``PublishResult`` whose ``wait_visible()`` returns the relay's description of the
        version (``checksums`` and ``dir`` included) once the relay verified it and serves it. A
        version the relay refuses (``ERR_CHECKSUM_MISMATCH``: bytes changed after they were
        checksummed) is aborted here, so the previous version stays the latest. The writer's
        mapping is given up: the bytes are the relay's now."""
        started = time.perf_counter()
        if not self.owner:
            raise LaminarError(error_codes.NOT_OWNER, "only the writer that began the publication commits it")
        self._check_open()
        self.flush()
        if self._connection.closed:
            # The publication went with the connection: fail here, where the caller can publish
            # again, not later in the verdict.
            raise ClosedError(f"the connection of the publication of {self.model} v{self.version} is lost")
        committed_at = time.perf_counter()
        result = PublishResult(self.model, self.version, self.segment, self.size, committed_at)
        answer = self._connection.request_future("commit", {"model": self.model, "version": self.version})
        self._finish()
        answer.add_done_callback(lambda f: self._verdict(f, result))
        result.stall_seconds = time.perf_counter() - started
        return result

    def _verdict(self, answer: Future, result: PublishResult) -> None:
        """The relay's answer to the commit (on the reader thread: nothing here waits for a response)."""
        err = answer.exception()
        if err is None:
            result._served(answer.result())
            return
        if isinstance(err, ClosedError) or self._connection.closed:
            result._refused(err)  # the relay dropped the publication with the connection
            return
        # The relay keeps a refused version writing (a writer could mend it); this one is finished,
        # so it is dropped now rather than left holding a segment, before anyone hears of the refusal.
        abort = self._connection.request_future("abort", {"model": self.model, "version": self.version})
        abort.add_done_callback(lambda _: result._refused(err))

    def abort(self) -> None:
        """Drops the publication (the owner tells the relay; another writer only stops). A
        publication whose connection is gone was dropped by the relay already."""
        if self._finished:
            return
        try:
            if self.owner:
                self._connection.request("abort", {"model": self.model, "version": self.version})
        except ClosedError:
            pass
        finally:
            self._finish()

    def close(self) -> None:
        """Ends this writer's part: reports what it wrote and unmaps. The owner closing without a
        commit aborts the publication instead."""
        if self._finished:
            return
        if self.owner:
            self.abort()
            return
        try:
            self.flush()
        finally:
            self._finish()

    def __enter__(self) -> "Publication":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
            return
        try:
            self.abort()
        except Exception as err:  # the original exception matters more
            warnings.warn(f"aborting {self!r} failed: {err}", RuntimeWarning, stacklevel=2)

    # -- internals ---------------------------------------------------------------------------

    def _prepare(self, name: str, tensor: Any) -> tuple[TensorInfo, TensorSource]:
        self._check_open()
        if self._connection.closed:
            # What is written could not be reported: the relay dropped an owner's publication
            # with its connection, and an attached writer cannot say what it wrote.
            raise ClosedError(f"the connection of the publication of {self.model} v{self.version} is lost")
        info = self.info(name)
        source = tensor_source(tensor)
        if source.nbytes != info.byte_length:
            raise LaminarError(
                error_codes.BAD_TENSOR,
                f"tensor {name!r} is {info.dtype} {list(info.shape)} ({info.byte_length} bytes), got {source.nbytes} bytes",
            )
        if not fills(info.dtype, source.dtype):
            raise LaminarError(error_codes.BAD_TENSOR, f"tensor {name!r} is {info.dtype}, got {source.dtype} data")
        return info, source

    def _add_report(self, name: str, pieces: list[Future]) -> None:
        with self._lock:
            self._reports.append((name, pieces))

    def _live_mapping(self) -> mmap.mmap:
        if self._mapping is None:
            raise LaminarError(error_codes.NOT_WRITING, f"publication of {self.model} v{self.version} is finished")
        return self._mapping

    def _check_open(self) -> None:
        if self._finished:
            raise LaminarError(error_codes.NOT_WRITING, f"publication of {self.model} v{self.version} is finished")

    def _finish(self) -> None:
        self._finished = True
        self._writer.close()
        mapping, self._mapping = self._mapping, None
        if mapping is not None:
            # Off the caller's path (the page-table walk of a written gigabyte); left to the
            # garbage collector if views from numpy()/tensor() still hold it.
            close_mapping_later(mapping)


def _wait_all(futures: list[Future]) -> list[Future]:
    for f in futures:
        f.exception()  # waits, never raises
    return futures


def _resolved(future: Future) -> Future:
    future.result()  # raises the copy's error here, in the writer's thread
    return future
