"""Action and result messages, wire version 1 (src/actions/wire.ts): msgpack maps with the same
short keys, and the subject and stream names of src/actions/names.ts."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Any, Dict

import msgpack

from .. import error_codes
from ..errors import LaminarError

WIRE_VERSION = 1
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
STATUSES = ("ok", "error", "timeout", "failed", "truncated", "bad_call")


def check_name(what: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise LaminarError(error_codes.BAD_ACTION, f"{what} must be 1-64 characters of [A-Za-z0-9_-], got {name!r}")
    return name


def id_token(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


@dataclass(frozen=True)
class ActionNames:
    pool: str

    @property
    def stream(self) -> str:
        return f"LAMINAR_ACT_{self.pool}"

    @property
    def result_stream(self) -> str:
        return f"LAMINAR_ACTRES_{self.pool}"

    @property
    def workers_bucket(self) -> str:
        return f"laminar_actw_{self.pool}"

    def queue_subject(self, kind: str) -> str:
        return f"laminar.act.{self.pool}.q.{check_name('an action kind', kind)}"

    def consumer(self, kind: str) -> str:
        return f"kind_{check_name('an action kind', kind)}"

    def result_subject(self, client: str, action_id: str) -> str:
        return f"laminar.act.{self.pool}.r.{client}.{id_token(action_id)}"

    def client_results(self, client: str) -> str:
        return f"laminar.act.{self.pool}.r.{client}.*"


def action_names(pool: str = "default") -> ActionNames:
    return ActionNames(check_name("an action pool name", pool))


_ACTION_FIELDS = {"id": str, "kind": str, "tool": str, "traj": str, "job": str, "timeoutMs": (int, float), "at": (int, float), "reply": str}


def decode_action(data: bytes) -> Dict[str, Any]:
    """An action message; LaminarError ERR_ACTION_MALFORMED if it is not one."""
    try:
        m = msgpack.unpackb(data, raw=False)
    except Exception as err:  # noqa: BLE001 - any decoding failure is the same condition
        raise LaminarError(error_codes.ACTION_MALFORMED, f"action: not msgpack ({err})") from err
    if not isinstance(m, dict) or m.get("v") != WIRE_VERSION:
        raise LaminarError(error_codes.ACTION_MALFORMED, "action: not a map of wire version 1")
    for key, kind in _ACTION_FIELDS.items():
        if not isinstance(m.get(key), kind):
            raise LaminarError(error_codes.ACTION_MALFORMED, f"action: {key} missing or of the wrong type")
    return m


def encode_action(**fields: Any) -> bytes:
    return msgpack.packb({"v": WIRE_VERSION, **fields}, use_bin_type=True)


def encode_result(**fields: Any) -> bytes:
    return msgpack.packb({"v": WIRE_VERSION, **fields}, use_bin_type=True)


def decode_result(data: bytes) -> Dict[str, Any]:
    try:
        m = msgpack.unpackb(data, raw=False)
    except Exception as err:  # noqa: BLE001
        raise LaminarError(error_codes.ACTION_MALFORMED, f"action result: not msgpack ({err})") from err
    if not isinstance(m, dict) or m.get("v") != WIRE_VERSION or m.get("status") not in STATUSES:
        raise LaminarError(error_codes.ACTION_MALFORMED, "action result: not a result of wire version 1")
    return m


def truncation_marker(n: int) -> str:
    return f"\n[... {n} bytes truncated]"


def cap_output(text: str, max_bytes: int) -> "tuple[str, bool]":
    """``text`` within ``max_bytes`` of UTF-8, marker included (as output-cap.ts)."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text, False
    keep = max(0, max_bytes - len(truncation_marker(len(data)).encode()))
    head = data[:keep].decode("utf-8", errors="ignore")
    return head + truncation_marker(len(data) - len(head.encode())), True
