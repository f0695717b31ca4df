"""One unix-socket connection to a relay: requests matched to responses by id, events delivered,
everything pending failed when the socket goes away.

A background thread reads the socket, cuts frames (frame.py) and dispatches: a response
completes the ``Future`` of its request, a ``version`` event goes to ``on_version_event``, a
``progress`` event to the callback of the request it reports on. Callers block on their future
(``request``) or hand it to asyncio (``asyncio.wrap_future``). Callbacks run on that thread: they
must be quick and must not wait for another response of the same connection.
"""

from __future__ import annotations

import concurrent.futures
import errno
import logging
import socket
import threading
from concurrent.futures import Future
from typing import Any, Callable, Mapping, Optional

from .. import error_codes
from ..errors import ClosedError, LaminarError, LaminarTimeoutError, RelayError
from ..wire_errors import error_from_wire
from .frame import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, decode_payload, encode_frame

log = logging.getLogger("laminar.relay")

ProgressCallback = Callable[[int, int], None]
VersionCallback = Callable[[Mapping[str, Any]], None]

RECV_BYTES = 256 * 1024
# close() waits this long for the reader to finish a callback it is running.
CLOSE_JOIN_SECONDS = 5.0
# sockaddr_un's sun_path holds 108 bytes, the terminating NUL included.
MAX_SOCKET_PATH_BYTES = 107


class _Pending:
    __slots__ = ("future", "on_progress")

    def __init__(self, future: Future, on_progress: Optional[ProgressCallback]) -> None:
        self.future = future
        self.on_progress = on_progress


class FrameConnection:
    """A connected socket speaking frames. Build it with ``FrameConnection.connect``."""

    def __init__(self, sock: socket.socket, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self._sock = sock
        self._max_frame_bytes = max_frame_bytes
        self._decoder = FrameDecoder(max_frame_bytes)
        # Both re-entrant: a watch finalised by the garbage collector while this thread holds one
        # of them sends its unwatch (never from inside sendall: no frame is cut by another).
        self._lock = threading.RLock()
        self._send_lock = threading.RLock()
        self._pending: dict[int, _Pending] = {}
        self._next_id = 1
        self._closed_error: Optional[LaminarError] = None
        self._close_listeners: list[Callable[[LaminarError], None]] = []
        #: Called on the reader thread with each ``version`` event.
        self.on_version_event: Optional[VersionCallback] = None
        self._reader = threading.Thread(target=self._read_loop, name="laminar-relay-reader", daemon=True)
        self._reader.start()

    @classmethod
    def connect(cls, path: str, timeout: Optional[float] = None, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> "FrameConnection":
        """Connects to the relay's socket at ``path``; ``ClosedError`` when nobody listens there."""
        if len(path.encode()) > MAX_SOCKET_PATH_BYTES:
            raise LaminarError(error_codes.INVALID_ARG, f"socket path {path!r} is longer than {MAX_SOCKET_PATH_BYTES} bytes")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.settimeout(None)
        except OSError as err:
            sock.close()
            reason = errno.errorcode.get(err.errno, str(err)) if err.errno else "timed out"
            raise ClosedError(f"cannot connect to the relay at {path}: {reason} (is `laminar relay` running?)") from err
        return cls(sock, max_frame_bytes)

    @property
    def closed(self) -> bool:
        return self._closed_error is not None

    def on_closed(self, fn: Callable[[LaminarError], None]) -> Callable[[], None]:
        """Calls ``fn(error)`` once when the connection ends (at once if it has); returns an
        unsubscribe function."""
        with self._lock:
            err = self._closed_error
            if err is None:
                self._close_listeners.append(fn)

                def unsubscribe() -> None:
                    with self._lock:
                        if fn in self._close_listeners:
                            self._close_listeners.remove(fn)

                return unsubscribe
        fn(err)
        return lambda: None

    def request_future(self, op: str, args: Mapping[str, Any], on_progress: Optional[ProgressCallback] = None) -> Future:
        """Sends ``{id, op, **args}``; the future completes with the result or a LaminarError."""
        future: Future = Future()
        # Running from the start: nobody may cancel it (an answer that arrives must find it).
        future.set_running_or_notify_cancel()
        with self._lock:
            if self._closed_error is not None:
                future.set_exception(self._closed_error)
                return future
            request_id = self._next_id
            self._next_id += 1
        try:
            frame = encode_frame({**args, "id": request_id, "op": op}, self._max_frame_bytes)
        except LaminarError as err:
            future.set_exception(err)
            return future
        with self._lock:
            if self._closed_error is not None:
                future.set_exception(self._closed_error)
                return future
            self._pending[request_id] = _Pending(future, on_progress)
        try:
            with self._send_lock:
                self._sock.sendall(frame)
        except OSError as err:
            self._fail(ClosedError(f"relay connection failed: {err}"))
        return future

    def request(self, op: str, args: Mapping[str, Any], timeout: Optional[float] = None, on_progress: Optional[ProgressCallback] = None) -> Any:
        """Sends a request and waits for its result (``timeout`` in seconds, None: no limit)."""
        future = self.request_future(op, args, on_progress)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if future.done():  # the relay's own answer was a timeout error
                raise
            with self._lock:
                for request_id, pending in list(self._pending.items()):
                    if pending.future is future:
                        del self._pending[request_id]
            raise LaminarTimeoutError(f"relay did not answer {op} within {timeout} s") from None

    def close(self) -> None:
        """Fails what is pending with ClosedError and closes the socket."""
        self._fail(ClosedError("connection closed by the client"))
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if threading.current_thread() is not self._reader:
            self._reader.join(CLOSE_JOIN_SECONDS)

    # -- the reader thread -----------------------------------------------------------------

    def _read_loop(self) -> None:
        try:
            while True:
                try:
                    data = self._sock.recv(RECV_BYTES)
                except OSError as err:
                    self._fail(ClosedError(f"relay connection failed: {err}"))
                    return
                if not data:
                    self._fail(ClosedError("the relay closed the connection"))
                    return
                try:
                    for payload in self._decoder.push(data):
                        self._dispatch(decode_payload(payload))
                except LaminarError as err:
                    # The byte stream cannot be trusted any more: this connection ends.
                    self._fail(err)
                    return
        finally:
            # Under the send lock: a sender never writes to a descriptor number closed here and
            # already reused by another file.
            with self._send_lock:
                self._sock.close()

    def _dispatch(self, message: Any) -> None:
        if not isinstance(message, dict):
            raise LaminarError(error_codes.BAD_FRAME, "unexpected message from the relay")
        event = message.get("event")
        if event == "version":
            callback = self.on_version_event
            if callback is not None:
                self._call_user(callback, message)
            return
        if event == "progress":
            with self._lock:
                pending = self._pending.get(message.get("id"))  # type: ignore[arg-type]
            if pending is not None and pending.on_progress is not None:
                self._call_user(pending.on_progress, int(message.get("done", 0)), int(message.get("total", 0)))
            return
        request_id = message.get("id")
        if not isinstance(request_id, int):
            # About the connection as a whole (a bad frame, no hello): everything fails.
            body = message.get("error")
            raise error_from_wire(body, sender="the relay", fallback=RelayError)
        with self._lock:
            pending = self._pending.pop(request_id, None)
        if pending is None:
            return  # its waiter gave up (a client-side timeout)
        if message.get("ok") is True:
            pending.future.set_result(message.get("result"))
        else:
            body = message.get("error")
            pending.future.set_exception(error_from_wire(body, sender="the relay", fallback=RelayError))

    @staticmethod
    def _call_user(fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # a callback's bug must not end the connection
            log.exception("relay event callback failed")

    def _fail(self, err: LaminarError) -> None:
        with self._lock:
            if self._closed_error is not None:
                return
            self._closed_error = err
            pending = list(self._pending.values())
            self._pending.clear()
            listeners = self._close_listeners
            self._close_listeners = []
        for p in pending:
            p.future.set_exception(err)
        for fn in listeners:
            self._call_user(fn, err)
