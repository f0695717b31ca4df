"""What the Python client and the relay agree on (protocol version 1): the version spoken, where
the relay's socket is when nobody says, and the shapes of results, as
src/relay/protocol/{messages,defaults}.ts define them. docs/reference/protocols.md lists every
operation.

    client -> relay   {id, op, ...args}                  (first: {id, op: 'hello', protocol: 1})
    relay  -> client  {id, ok: true, result} | {id, ok: false, error: {code, message, details?}}
    relay  -> client  {event: 'version', watch, ...} | {event: 'progress', id, done, total}
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

PROTOCOL_VERSION = 1
DEFAULT_SHM_DIR = "/dev/shm/laminar"
DEFAULT_CHUNK_SIZE = 32 * 1024 * 1024
SOCKET_ENV = "LAMINAR_RELAY_SOCKET"
SHM_DIR_ENV = "LAMINAR_SHM_DIR"


def default_socket_path() -> str:
    """``$LAMINAR_RELAY_SOCKET``, else ``relay.sock`` in ``$LAMINAR_SHM_DIR``, else in the default
    shm directory: the relay CLI's own precedence (``--socket`` > LAMINAR_RELAY_SOCKET >
    ``<shm-dir>/relay.sock``, the shm dir from ``--shm-dir`` > LAMINAR_SHM_DIR > the default), so
    that a client started with the relay's environment (the deploy files set LAMINAR_SHM_DIR for
    both) finds it. Empty variables count as unset."""
    return os.environ.get(SOCKET_ENV) or os.path.join(os.environ.get(SHM_DIR_ENV) or DEFAULT_SHM_DIR, "relay.sock")


@dataclass(frozen=True)
class TensorInfo:
    """Where a tensor lies in a version's segment (``offset`` counts from the file's start)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    byte_length: int

    @classmethod
    def from_wire(cls, t: Mapping[str, Any]) -> "TensorInfo":
        return cls(str(t["name"]), str(t["dtype"]), tuple(int(d) for d in t["shape"]), int(t["offset"]), int(t["byteLength"]))


def tensor_index(description: Mapping[str, Any]) -> dict[str, TensorInfo]:
    """The tensors of a segment description (acquire, begin, attach results), by name, in order."""
    return {t["name"]: TensorInfo.from_wire(t) for t in description["tensors"]}


@dataclass(frozen=True)
class VersionEvent:
    """A version that completed on the relay, as a watch delivers it."""

    model: str
    version: int
    size: int
    segment: str

    @classmethod
    def from_wire(cls, event: Mapping[str, Any]) -> "VersionEvent":
        return cls(str(event["model"]), int(event["version"]), int(event["size"]), str(event["segment"]))
