"""The few JetStream API calls the experience buffer makes beyond a publish, as plain requests
with the same JSON bodies as nats.js sends: a stream's info and creation, and message gets (by
sequence, or the last message on a subject) that return the stored message with its headers.
Errors are nats-py's own (`nats.js.errors.APIError` and its subclasses), so that the caller
handles one family of exceptions.

Two message gets, as in src/data/leader-read.ts: `direct_get` is answered by any replica of a
stream with `allow_direct`, including one that has fallen behind (a node back from a partition or
a restart), which says "no such message" for one the leader holds; `leader_get` (the JetStream
API's STREAM.MSG.GET) is answered by the stream's leader only. Whatever decides a regeneration
(`ExperienceWriter.has`) reads through the leader."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Dict, Optional

import nats.js.errors
from nats.aio.client import Client as NATS

API_PREFIX = "$JS.API"


async def api_request(nc: NATS, subject: str, body: Optional[Dict[str, Any]], timeout: float) -> Dict[str, Any]:
    """A JetStream API request; raises the API's error as nats-py's `APIError` subclasses, and
    nats-py's own errors (a timeout, no responders: JetStream is not up) as they come."""
    payload = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    msg = await nc.request(f"{API_PREFIX}.{subject}", payload, timeout=timeout)
    resp = json.loads(msg.data)
    if "error" in resp:
        nats.js.errors.APIError.from_error(resp["error"])  # raises
    return resp


@dataclass(frozen=True)
class StoredMessage:
    """A message as the stream holds it."""

    seq: int
    subject: str
    headers: Dict[str, str]
    data: bytes


def _message_query(seq: Optional[int], last_by_subj: Optional[str]) -> Dict[str, Any]:
    """The body of a message get: by sequence, or the last message on a subject."""
    return {"seq": seq} if last_by_subj is None else {"last_by_subj": last_by_subj}


async def direct_get(
    nc: NATS,
    stream: str,
    *,
    seq: Optional[int] = None,
    last_by_subj: Optional[str] = None,
    timeout: float,
) -> Optional[StoredMessage]:
    """A message of a stream with `allow_direct`, by sequence or the last on a subject; None
    when there is no such message. No responders: the stream does not exist (or JetStream is
    not up yet), as nats-py's NoRespondersError."""
    body = _message_query(seq, last_by_subj)
    msg = await nc.request(f"{API_PREFIX}.DIRECT.GET.{stream}", json.dumps(body, separators=(",", ":")).encode(), timeout=timeout)
    headers = dict(msg.headers or {})
    status = headers.get("Status")
    if status is not None and not msg.data:
        if status == "404":
            return None
        raise nats.js.errors.APIError(code=int(status), description=headers.get("Description", f"direct get answered {status}"))
    return StoredMessage(seq=int(headers["Nats-Sequence"]), subject=headers["Nats-Subject"], headers=headers, data=msg.data)


_NO_MESSAGE_FOUND = 10037


def _parse_headers(block: bytes) -> Dict[str, str]:
    """Headers of a stored message as the JetStream API gives them: `NATS/1.0` then `Name: value`
    lines (the first value of a repeated name, as nats.js's `get` gives it)."""
    headers: Dict[str, str] = {}
    for line in block.decode().split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep and name not in headers:
            headers[name] = value.strip()
    return headers


async def leader_get(nc: NATS, stream: str, *, seq: Optional[int] = None, last_by_subj: Optional[str] = None, timeout: float) -> Optional[StoredMessage]:
    """A message of a stream as its leader holds it, by sequence or the last on a subject; None
    when there is none. While the stream has no leader: a timeout, or the API's "cluster not
    available" (err_code 10008), both retried by retry.py."""
    try:
        resp = await api_request(nc, f"STREAM.MSG.GET.{stream}", _message_query(seq, last_by_subj), timeout)
    except nats.js.errors.APIError as err:
        if err.err_code == _NO_MESSAGE_FOUND:
            return None
        raise
    m = resp["message"]
    headers = _parse_headers(base64.b64decode(m["hdrs"])) if m.get("hdrs") else {}
    data = base64.b64decode(m["data"]) if m.get("data") else b""
    return StoredMessage(seq=int(m["seq"]), subject=m["subject"], headers=headers, data=data)
