"""One connection to the relay after its ``hello``, and the watches that live on it.

Watch ids are the relay's and mean nothing on another connection (a restarted relay numbers
from 1 again), so they belong to the session. Version events that arrive before their watch is
registered (in the same read as the watch's own response, or the replay right after it) wait in
a bounded queue instead of being lost.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Optional

from .. import error_codes
from ..errors import ClosedError, LaminarError
from .connection import FrameConnection
from .protocol import PROTOCOL_VERSION

#: Version events a watch may have waiting (in the session, or unread by its consumer).
WATCH_QUEUE_LIMIT = 1024

Deliver = Callable[[Mapping[str, Any]], None]


class Session:
    """A connection that said hello: the relay's identity, and the watchers of its events."""

    def __init__(self, connection: FrameConnection, hello: Mapping[str, Any]) -> None:
        self.connection = connection
        self.relay_id: str = hello["relay"]
        self.shm_dir: str = hello["shmDir"]
        self.chunk_size: int = int(hello["chunkSize"])
        self.max_frame_bytes: int = int(hello["maxFrameBytes"])
        # Re-entrant: a watch finalised by the garbage collector on the reader thread, in the middle
        # of a delivery, drops its watcher from inside the lock.
        self._lock = threading.RLock()
        self._watchers: dict[int, Deliver] = {}
        self._early: dict[int, list[Mapping[str, Any]]] = {}
        self._dropped: set[int] = set()
        connection.on_version_event = self._on_version_event

    @classmethod
    def open(cls, socket_path: str, name: str, connect_timeout: float) -> "Session":
        """Connects and says hello. A relay that accepts but does not answer in time is as
        unreachable as one that is not there: ``ClosedError`` either way."""
        connection = FrameConnection.connect(socket_path, connect_timeout)
        try:
            hello = connection.request("hello", {"protocol": PROTOCOL_VERSION, "client": name[:200]}, timeout=connect_timeout)
            return cls(connection, hello)
        except LaminarError as err:
            connection.close()
            if err.code == error_codes.TIMEOUT:
                raise ClosedError(f"the relay at {socket_path} did not answer hello within {connect_timeout} s") from err
            raise
        except BaseException:
            connection.close()
            raise

    def add_watcher(self, watch: int, deliver: Deliver) -> None:
        """Routes ``watch``'s events to ``deliver``, those that came early first."""
        with self._lock:
            early = self._early.pop(watch, [])
            for event in early:
                deliver(event)
            self._watchers[watch] = deliver

    def drop_watcher(self, watch: int) -> None:
        """Stops routing ``watch``'s events; those still on their way are discarded."""
        with self._lock:
            self._watchers.pop(watch, None)
            self._early.pop(watch, None)
            self._dropped.add(watch)

    def _on_version_event(self, event: Mapping[str, Any]) -> None:
        watch = event.get("watch")
        if not isinstance(watch, int):
            return
        with self._lock:
            deliver: Optional[Deliver] = self._watchers.get(watch)
            if deliver is None:
                if watch not in self._dropped:
                    queue = self._early.setdefault(watch, [])
                    if len(queue) < WATCH_QUEUE_LIMIT:
                        queue.append(event)
                return
            deliver(event)
