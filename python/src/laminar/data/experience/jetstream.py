"""The few JetStream API calls the experience buffer makes beyond a publish, as plain requests
with the same JSON bodies as nats.js sends: a stream's info and creation, and direct gets (by
sequence, or the last message on a subject) that return the stored message with its headers.
Errors are nats-py's own (`nats.js.errors.APIError` and its subclasses), so that the caller
handles one family of exceptions."""

from __future__ import annotations

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
    body: Dict[str, Any] = {"seq": seq} if last_by_subj is None else {"last_by_subj": last_by_subj}
    msg = await nc.request(f"{API_PREFIX}.DIRECT.GET.{stream}", json.dumps(body, separators=(",", ":")).encode(), timeout=timeout)
    headers = dict(msg.headers or {})
    status = headers.get("Status")
    if status is not None and not msg.data:
        if status == "404":
            return None
        raise nats.js.errors.APIError(code=int(status), description=headers.get("Description", f"direct get answered {status}"))
    return StoredMessage(seq=int(headers["Nats-Sequence"]), subject=headers["Nats-Subject"], headers=headers, data=msg.data)
