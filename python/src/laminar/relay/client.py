"""``RelayClient``: what a Python trainer or rollout links with to talk to its host's relay.

    with laminar.RelayClient() as relay:
        result = relay.publish("policy", step, model.state_dict())   # trainer: back to training
        result.wait_visible(timeout=60)                               # verified and served (optional)
        with relay.acquire("policy", at_least=step, timeout=60) as lease:
            weights = lease.torch()                                   # zero-copy views
        for event in relay.watch("policy", replay=True): ...          # each version as it completes

The client outlives the relay process, as the TypeScript client does: when the relay goes away
(a crash, a restart, an upgrade), the next request connects to the socket again and watches
subscribe again. What belonged to the old connection (leases, publications) went with it, as
the relay gave it up: such a lease releases silently, such a publication fails with
``ERR_CLOSED``. With ``reconnect=False`` a lost connection fails every later request with
``ERR_CLOSED``.
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import numpy as np

from .. import error_codes
from ..errors import ClosedError, LaminarError
from .dtypes import safetensors_dtype
from .lease import Lease
from .lora import AdapterConfig, lora_request
from .parts import part_metadata
from .protocol import default_socket_path
from .publication import Publication, Tensors
from .publish_result import PublishResult
from .segment_map import map_read_only, map_writable
from .session import Session
from .watch import AsyncWatch, Watch

#: A tensor spec: ``(name, dtype, shape)`` or ``{"name", "dtype", "shape"}``; dtype as a
#: safetensors name ("BF16"), a numpy dtype or a torch dtype.
Spec = Union[tuple[str, Any, Sequence[int]], Mapping[str, Any]]


def _default_copy_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def specs_of(tensors: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The specs (name, safetensors dtype, shape) of a mapping of torch tensors or numpy arrays,
    e.g. a state_dict: what rank 0 passes to ``begin`` when every rank's tensors are known up
    front. Nothing is copied or moved (a CUDA tensor stays where it is)."""
    out = []
    for name, tensor in tensors.items():
        dtype = getattr(tensor, "dtype", None)
        if dtype is None or not hasattr(tensor, "shape"):
            raise LaminarError(error_codes.INVALID_ARG, f"tensor {name!r} is a {type(tensor).__name__}: give its spec (name, dtype, shape)")
        out.append({"name": name, "dtype": safetensors_dtype(dtype), "shape": [int(d) for d in tensor.shape]})
    return out


def _wire_spec(spec: Spec) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        name, dtype, shape = spec.get("name"), spec.get("dtype"), spec.get("shape")
    else:
        try:
            name, dtype, shape = spec
        except (TypeError, ValueError):
            raise LaminarError(error_codes.BAD_TENSOR, f"a tensor spec is (name, dtype, shape), got {spec!r}") from None
    if isinstance(shape, (list, tuple)):  # torch.Size is a tuple
        # numpy integers become ints; anything else goes as given: the relay's validation names it.
        shape = [int(d) if isinstance(d, (int, np.integer)) and not isinstance(d, bool) else d for d in shape]
    return {"name": name, "dtype": safetensors_dtype(dtype), "shape": shape}


class RelayClient:
    """A connection to the relay on this host (see the module doc).

    ``socket_path``: the relay's socket (default ``$LAMINAR_RELAY_SOCKET``, else ``relay.sock`` in
    ``$LAMINAR_SHM_DIR``, else ``/dev/shm/laminar/relay.sock``, as the relay CLI places it); ``name``: shown in the relay's logs; ``reconnect``: connect
    again after losing the relay; ``connect_timeout``: seconds the relay may take to answer a new
    connection's hello; ``copy_threads``: threads that copy and checksum published tensors
    (default: the cores, at most 4). Connects at once (``ClosedError`` when no relay listens).
    """

    def __init__(
        self,
        socket_path: Optional[str] = None,
        name: Optional[str] = None,
        reconnect: bool = True,
        connect_timeout: float = 10.0,
        *,
        copy_threads: Optional[int] = None,
    ) -> None:
        self.socket_path = socket_path or default_socket_path()
        self.name = name or f"python pid {os.getpid()}"
        self.reconnect = reconnect
        self.connect_timeout = connect_timeout
        self._copy_threads = copy_threads or _default_copy_threads()
        self._lock = threading.Lock()  # the session: one reconnection attempt at a time
        self._executor_lock = threading.Lock()
        self._closed = False
        self._reconnects = 0
        self._executor: Optional[ThreadPoolExecutor] = None
        self._watches: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._session = Session.open(self.socket_path, self.name, connect_timeout)

    def __repr__(self) -> str:
        return f"RelayClient({self.socket_path!r}, relay={self.relay_id!r}, {'closed' if self.closed else 'open'})"

    # -- state -------------------------------------------------------------------------------

    @property
    def relay_id(self) -> str:
        """The relay's id (after a reconnect, the one now serving the socket)."""
        return self._session.relay_id

    @property
    def shm_dir(self) -> str:
        return self._session.shm_dir

    @property
    def chunk_size(self) -> int:
        """The relay's chunk size for new versions."""
        return self._session.chunk_size

    @property
    def copy_threads(self) -> int:
        """Threads that copy and checksum published tensors."""
        return self._copy_threads

    @property
    def connected(self) -> bool:
        """Whether the connection is up now (False while the relay is away, until a request)."""
        return not self._session.connection.closed

    @property
    def reconnects(self) -> int:
        """How many times the client connected again after losing the relay."""
        return self._reconnects

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called, or once the connection is lost without reconnect."""
        return self._closed or (not self.reconnect and self._session.connection.closed)

    def _live(self) -> Session:
        """The session to send on: the current one while it is up; otherwise, unless the client
        was closed or reconnection is off, a new one (concurrent callers share one attempt). A
        relay that is not back yet fails at once with ``ClosedError``."""
        with self._lock:
            current = self._session
            if self._closed:
                raise ClosedError("the relay client was closed")
            if not current.connection.closed or not self.reconnect:
                return current
            session = Session.open(self.socket_path, self.name, self.connect_timeout)
            self._session = session
            self._reconnects += 1
            return session

    def _executor_now(self) -> Executor:
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._copy_threads, thread_name_prefix="laminar-copy")
            return self._executor

    def _track_watch(self, control: Any) -> None:
        self._watches.add(control)

    # -- requests ----------------------------------------------------------------------------

    def request(self, op: str, **args: Any) -> Any:
        """Sends a raw request of protocol version 1 (arguments by their wire names) and returns
        its result; the relay's errors raise the class of their code (``laminar.error_classes``:
        ``LaminarTimeoutError`` for ERR_TIMEOUT), or ``RelayError``, with the code."""
        return self._live().connection.request(op, args)

    def status(self) -> dict[str, Any]:
        """The relay's status: versions, leases, memory, connections, broadcast."""
        return self.request("status")

    def set_plan(self, plan: Mapping[str, Any]) -> dict[str, Any]:
        """Hands the relay a chain plan ``{epoch, relays: [{id, address}]}``; applied only when its
        epoch is newer than the one in force (``applied``)."""
        return self.request("plan", plan=dict(plan))

    # -- reading -----------------------------------------------------------------------------

    def acquire(self, model: str, version: Optional[int] = None, at_least: Optional[int] = None, timeout: float = 0.0) -> Lease:
        """Leases a version and maps it read-only: ``version`` exactly, or the latest if it is
        ``>= at_least``, or the latest. ``timeout``: seconds to wait for a matching version to
        complete (0: answer now). Use the lease as a context manager, or ``release()`` it."""
        args: dict[str, Any] = {"model": model}
        if version is not None:
            args["version"] = version
        if at_least is not None:
            args["atLeast"] = at_least
        if timeout:
            ms = timeout * 1000
            args["timeoutMs"] = math.ceil(ms) if ms > 0 else ms  # a negative one: the relay says so
        connection = self._live().connection
        result = connection.request("acquire", args)
        try:
            mapping = map_read_only(result["path"])
        except BaseException:
            try:
                connection.request("release", {"lease": result["lease"]})
            except LaminarError:
                pass
            raise
        return Lease(connection, result, mapping, self._executor_now)

    def watch(self, model: Optional[str] = None, replay: bool = False) -> Watch:
        """An iterator of ``VersionEvent``s as versions complete (of ``model``, or of every model);
        with ``replay``, the latest complete version of each model first. Stop by breaking out of
        the loop, ``close()``, or closing the client; it survives relay restarts."""
        return Watch(self, model, replay)

    def awatch(self, model: Optional[str] = None, replay: bool = False) -> AsyncWatch:
        """``watch`` as an async iterator for asyncio."""
        return AsyncWatch(self, model, replay)

    # -- publishing --------------------------------------------------------------------------

    def begin(
        self,
        model: str,
        version: int,
        specs: Iterable[Spec],
        metadata: Optional[Mapping[str, str]] = None,
        chunk_size: Optional[int] = None,
        *,
        lora: Optional[Mapping[str, Any]] = None,
    ) -> Publication:
        """Lays out a new version of ``specs`` (``(name, dtype, shape)`` each, in segment order)
        and maps it writable, page tables pre-faulted. This writer owns the publication: it
        commits or aborts it; other writers ``attach(publication.segment)``. ``lora``: the
        version is a LoRA adapter (``laminar.relay.lora.lora_request``; ``publish_lora`` is the
        one call for it)."""
        args: dict[str, Any] = {"model": model, "version": version, "tensors": [_wire_spec(s) for s in specs]}
        if metadata is not None:
            args["metadata"] = dict(metadata)
        if lora is not None:
            args["lora"] = dict(lora)
        if chunk_size is not None:
            args["chunkSize"] = chunk_size
        connection = self._live().connection
        description = connection.request("begin", args)
        return self._open_publication(connection, description, owner=True)

    def attach(self, segment: str) -> Publication:
        """Joins a publication another writer began (e.g. trainer rank 0), by segment name."""
        connection = self._live().connection
        description = connection.request("attach", {"segment": segment})
        return self._open_publication(connection, description, owner=False)

    def _open_publication(self, connection: Any, description: Mapping[str, Any], owner: bool) -> Publication:
        # The publication lives on the connection that began it: the relay drops it with it.
        try:
            mapping = map_writable(description["path"], int(description["size"]))
        except BaseException:
            if owner:
                try:
                    connection.request("abort", {"model": description["model"], "version": description["version"]})
                except LaminarError:
                    pass
            raise
        return Publication(connection, description, mapping, owner, self._executor_now())

    def publish(
        self,
        model: str,
        version: int,
        tensors: Tensors,
        metadata: Optional[Mapping[str, str]] = None,
        *,
        specs: Optional[Iterable[Spec]] = None,
        chunk_size: Optional[int] = None,
        part: Optional[tuple[int, int]] = None,
        manifest: Optional[Iterable[Spec]] = None,
        lora: Optional[Mapping[str, Any]] = None,
    ) -> PublishResult:
        """Publishes a version in one call: begin, copy every tensor into the segment (copies and
        checksums in parallel), commit. ``tensors``: a mapping of name to torch tensor (any
        device) or numpy array, e.g. ``model.state_dict()``; or an iterator of ``(name, tensor)``
        pairs (a per-tensor parameter stream), with ``specs`` given up front. Returns as soon as
        the bytes are in the relay's segment and the commit is sent (the tensors may change from
        then on): the relay verifies the version after, and serves it only once it passed. The
        ``PublishResult``'s ``wait_visible()`` waits for that and returns the relay's description
        of the version; a refused version (``ERR_CHECKSUM_MISMATCH``) is aborted and raised there.
        On any failure before the return the publication is aborted and the error raised.

        A trainer whose tensors live on several hosts publishes from each host into the
        forwarding relay there, at once: ``part=(k, n)`` (this host's part, k from 1) and
        ``manifest`` (every tensor of the version, in order, the same list on every host) make
        this publication part k of n, which the forwarding relay pushes to the master; the master
        serves the version once every part is in. See docs/components/python-relay.md."""
        started = time.perf_counter()
        if (part is None) != (manifest is None):
            raise LaminarError(error_codes.INVALID_ARG, "part=(k, n) and manifest=[every spec] go together")
        if part is not None and manifest is not None:
            metadata = {**(metadata or {}), **part_metadata(part, [_wire_spec(s) for s in manifest])}
        streamed = not isinstance(tensors, Mapping)
        if specs is None:
            if streamed:
                raise LaminarError(error_codes.INVALID_ARG, "publishing an iterator of (name, tensor) needs specs=[(name, dtype, shape), ...] up front")
            specs = specs_of(tensors)  # type: ignore[arg-type]
        publication = self.begin(model, version, specs, metadata, chunk_size, lora=lora)
        try:
            if streamed:
                # One at a time: a stream's tensors may be temporaries (a gathered parameter).
                for name, tensor in tensors:  # type: ignore[misc]
                    publication.write(name, tensor)
            else:
                publication.write_many(tensors)
            result = publication.commit()
            result.stall_seconds = time.perf_counter() - started
            return result
        except BaseException:
            try:
                publication.abort()
            except LaminarError:
                pass  # the original error matters more
            raise

    def publish_lora(
        self,
        model: str,
        version: int,
        state_dict: Mapping[str, Any],
        *,
        config: AdapterConfig,
        base_model: str,
        base_version: Optional[int] = None,
        chunk_size: Optional[int] = None,
    ) -> PublishResult:
        """Publishes a LoRA adapter as version ``version`` of ``model``: ``state_dict`` with the
        keys ``peft.get_peft_model_state_dict`` gives (``base_model.model.<module>.lora_A.weight``
        [r, in] and ``.lora_B.weight`` [out, r]), ``config`` its adapter_config.json (text, a
        mapping, or PEFT's ``LoraConfig``), ``base_model`` the model id of the base the relay
        holds, and ``base_version`` the version trained against, which every relay then keeps
        while it holds the adapter. The relay serves it in PEFT's layout
        (``adapter_model.safetensors`` and ``adapter_config.json`` in its version directory).
        Refused before anything is allocated: ``ERR_LORA_BAD_CONFIG``, ``ERR_LORA_BAD_TENSORS``,
        ``ERR_LORA_BASE_MISMATCH``. Returns as ``publish`` does."""
        return self.publish(model, version, state_dict, chunk_size=chunk_size, lora=lora_request(config, base_model, base_version))

    def publish_file(
        self,
        path: str,
        model: str,
        version: int,
        on_progress: Optional[Callable[[int, int], None]] = None,
        chunk_size: Optional[int] = None,
    ) -> dict[str, Any]:
        """Has the relay adopt a checkpoint (a ``.safetensors`` file, or a directory of shards with
        ``model.safetensors.index.json``) as a version; the relay reads the files itself, so
        ``path`` must be readable on the relay's host. ``on_progress(done, total)`` runs on the
        client's reader thread."""
        args: dict[str, Any] = {"model": model, "version": version, "path": os.path.abspath(path)}
        if chunk_size is not None:
            args["chunkSize"] = chunk_size
        return self._live().connection.request("adopt", args, on_progress=on_progress)

    # -- life --------------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connection (the relay releases its leases and drops its unfinished
        publication) and ends every watch."""
        with self._lock:
            self._closed = True
        with self._executor_lock:
            executor, self._executor = self._executor, None
        for control in list(self._watches):
            control.stop()
        self._session.connection.close()
        if executor is not None:
            executor.shutdown(wait=False)

    def __enter__(self) -> "RelayClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
