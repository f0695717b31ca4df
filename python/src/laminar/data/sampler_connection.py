"""The sampler service's socket, from Python: requests and their answers, one at a time, and a
new connection whenever the service went away (it was restarted, or is starting).

The service speaks the relay's frames (``laminar.relay.frame``: length-prefixed msgpack) with
its own operations (docs/reference/protocols.md, "Sampler service"). Every request is answered
before the next is sent, so this is a plain blocking socket without a reader thread; a lock keeps
two threads of one trainer from interleaving their requests.
"""

from __future__ import annotations

import errno
import os
import socket
import threading
import time
from typing import Any, Callable, Mapping, Optional, Union

from .. import error_codes
from ..errors import ClosedError, LaminarError, LaminarTimeoutError
from ..relay.frame import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, decode_payload, encode_frame
from ..wire_errors import error_from_wire

PROTOCOL_VERSION = 1
RECV_BYTES = 256 * 1024
# sockaddr_un's sun_path holds 108 bytes, the terminating NUL included.
MAX_SOCKET_PATH_BYTES = 107
# Waits between connection attempts while the service is away: doubling, at most the cap.
FIRST_RETRY_SECONDS = 0.05
MAX_RETRY_SECONDS = 1.0


class _Link:
    """One connected socket after its hello."""

    def __init__(self, sock: socket.socket, hello: Mapping[str, Any], epoch: int) -> None:
        self.sock = sock
        self.hello = hello
        self.epoch = epoch
        self.decoder = FrameDecoder(DEFAULT_MAX_FRAME_BYTES)
        self.next_id = 1


class SamplerConnection:
    """Requests to the sampler service at ``path``, reconnecting when it went away.

    ``epoch`` counts connections: a batch belongs to the connection it came from, and the service
    releases a connection's batches when it ends, so a batch of an earlier epoch is released only
    locally. ``on_connect(hello, first)`` runs after each new connection's hello (the sampler puts
    its trainer version back into a restarted service there).
    """

    def __init__(
        self,
        path: str,
        *,
        client: str,
        reconnect_timeout: float,
        on_connect: Optional[Callable[[Mapping[str, Any], bool], None]] = None,
    ) -> None:
        if len(path.encode()) > MAX_SOCKET_PATH_BYTES:
            raise LaminarError(error_codes.INVALID_ARG, f"socket path {path!r} is longer than {MAX_SOCKET_PATH_BYTES} bytes")
        self.path = path
        self._client = client
        self._reconnect_timeout = reconnect_timeout
        self._on_connect = on_connect
        self._lock = threading.RLock()
        self._link: Optional[_Link] = None
        self._epoch = 0
        self._closed = False
        self.reconnects = 0

    @property
    def epoch(self) -> int:
        """The current connection's number (0 before the first)."""
        return self._epoch

    @property
    def hello(self) -> Mapping[str, Any]:
        """The current connection's hello answer (connecting first if needed)."""
        with self._lock:
            return self._connected(time.monotonic() + self._reconnect_timeout).hello

    def request(
        self,
        op: str,
        args: Union[Mapping[str, Any], Callable[[], Mapping[str, Any]]],
        *,
        wait: Optional[float] = None,
        retry: bool = True,
    ) -> tuple[Any, int]:
        """Sends ``op`` and returns ``(result, epoch)``. ``args``: the arguments, or a function
        giving them for each attempt (a deadline shrinks). ``wait``: how long the answer may take
        (None: as long as it takes). A request that fails because the service went away is sent
        again on a new connection when ``retry``, for up to the reconnect timeout."""
        with self._lock:
            deadline = time.monotonic() + self._reconnect_timeout
            while True:
                link = self._connected(deadline)
                try:
                    return self._exchange(link, op, args() if callable(args) else args, wait), link.epoch
                except ClosedError:
                    self._drop(link)
                    if not retry or self._closed or time.monotonic() >= deadline:
                        raise
                    # Gone between two requests, or while this one waited: a new connection.
                    deadline = time.monotonic() + self._reconnect_timeout

    def close(self) -> None:
        """Closes the socket (the service releases this connection's batches)."""
        with self._lock:
            self._closed = True
            if self._link is not None:
                self._drop(self._link)

    # -- connecting ---------------------------------------------------------------------------

    def _connected(self, deadline: float) -> _Link:
        if self._closed:
            raise ClosedError("the sampler is closed")
        if self._link is not None:
            return self._link
        delay = FIRST_RETRY_SECONDS
        while True:
            try:
                link = self._open()
                break
            except ClosedError:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_SECONDS)
        first = self._epoch == 0
        self._epoch += 1
        if not first:
            self.reconnects += 1
        self._link = link
        if self._on_connect is not None:
            self._on_connect(link.hello, first)
        return link

    def _open(self) -> _Link:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.path)
        except OSError as err:
            sock.close()
            reason = errno.errorcode.get(err.errno, str(err)) if err.errno else str(err)
            raise ClosedError(f"cannot connect to the sampler service at {self.path}: {reason} (is `laminar sampler` running?)") from err
        link = _Link(sock, {}, self._epoch + 1)
        try:
            hello = self._exchange(link, "hello", {"protocol": PROTOCOL_VERSION, "client": self._client}, 30.0)
        except LaminarError:
            sock.close()
            raise
        link.hello = hello
        return link

    def _drop(self, link: _Link) -> None:
        if self._link is link:
            self._link = None
        try:
            link.sock.close()
        except OSError:
            pass

    # -- one request --------------------------------------------------------------------------

    def _exchange(self, link: _Link, op: str, args: Mapping[str, Any], wait: Optional[float]) -> Any:
        request_id = link.next_id
        link.next_id += 1
        frame = encode_frame({**args, "id": request_id, "op": op})
        sock = link.sock
        try:
            sock.settimeout(None)
            sock.sendall(frame)
        except OSError as err:
            raise ClosedError(f"sampler service connection failed: {os.strerror(err.errno) if err.errno else err}") from err
        sock.settimeout(wait)
        while True:
            for payload in link.decoder.push(self._recv(link, op, wait)):
                message = decode_payload(payload)
                if not isinstance(message, dict):
                    raise LaminarError(error_codes.BAD_FRAME, "unexpected message from the sampler service")
                got = message.get("id")
                if got is None:
                    # About the connection as a whole (a bad frame): it ends.
                    self._drop(link)
                    raise error_from_wire(message.get("error"), sender="the sampler service")
                if got != request_id:
                    continue  # the answer to a request whose waiter gave up
                if message.get("ok") is True:
                    return message.get("result")
                raise error_from_wire(message.get("error"), sender="the sampler service")

    def _recv(self, link: _Link, op: str, wait: Optional[float]) -> bytes:
        try:
            data = link.sock.recv(RECV_BYTES)
        except socket.timeout:
            # The answer may still come: this connection cannot be trusted to be in step any more.
            self._drop(link)
            raise LaminarTimeoutError(f"the sampler service did not answer {op} within {wait} s") from None
        except OSError as err:
            raise ClosedError(f"sampler service connection failed: {os.strerror(err.errno) if err.errno else err}") from err
        if not data:
            raise ClosedError("the sampler service closed the connection")
        return data
