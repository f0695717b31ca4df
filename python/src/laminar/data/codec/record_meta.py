"""The metadata of a stored trajectory, as src/data/codec/record-meta.ts: carried in the
`Laminar-Meta` header of its record message as base64(msgpack) with a version field, so that
the sampler indexes records from headers alone.

The keys are written in the TypeScript order with the absent optionals (``rolloutId``,
``info``) left out, and packed as msgpackr packs them (msgpack_js.py), so that a record from
Python is the same bytes as one from TypeScript.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any, Dict, List, Optional, Sequence

import msgpack

from ..errors import CorruptRecordError
from .js_values import is_number, js_key_order
from .msgpack_js import pack_js
from .trajectory import Trajectory, payload_bytes

META_HEADER = "Laminar-Meta"
RECORD_VERSION = 1


def meta_of(t: Trajectory, chunk_seqs: Sequence[int]) -> Dict[str, Any]:
    """The record metadata of a validated trajectory, keys in the record's order."""
    meta: Dict[str, Any] = {
        "v": RECORD_VERSION,
        "id": t.id,
        "promptId": t.prompt_id,
        "groupId": t.group_id,
        "sampleIndex": t.sample_index,
        "groupSize": t.group_size,
        "weightVersion": t.weight_version,
        "reward": t.reward,
        "tokenCount": len(t.tokens),
        "promptLength": t.prompt_length,
        "responseLength": t.response_length,
        "createdAt": t.created_at,
        "completedAt": t.completed_at,
    }
    if t.rollout_id is not None:
        meta["rolloutId"] = t.rollout_id
    meta["priority"] = 1 if t.priority is None else t.priority
    if t.info is not None:
        meta["info"] = {k: t.info[k] for k in js_key_order(t.info)}
    meta["bytes"] = payload_bytes(t)
    meta["chunkSeqs"] = list(chunk_seqs)
    return meta


def encode_meta(meta: Dict[str, Any]) -> str:
    """The `Laminar-Meta` header value: base64 of msgpackr's bytes."""
    return base64.b64encode(pack_js(meta)).decode("ascii")


_INT_FIELDS = {
    "sampleIndex": 0,
    "groupSize": 1,
    "weightVersion": 0,
    "tokenCount": 0,
    "promptLength": 0,
    "responseLength": 0,
    "bytes": 0,
}
_STR_FIELDS = ("id", "promptId", "groupId")


def _int(v: Any) -> Optional[int]:
    """An integral number (msgpackr writes integers of 2^32 and more as float64)."""
    if isinstance(v, bool) or not is_number(v):
        return None
    x = float(v)
    if not math.isfinite(x) or not x.is_integer():
        return None
    return int(v) if isinstance(v, int) else int(x)


def _finite(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not is_number(v) or not math.isfinite(float(v)):
        return None
    return float(v)


def decode_meta(header: str) -> Dict[str, Any]:
    """Decodes and validates a `Laminar-Meta` header; raises `CorruptRecordError` on anything
    that is not a v1 record. Integral numbers come back as int, the others as float; unknown
    keys are dropped (as zod drops them)."""

    def corrupt(why: str) -> CorruptRecordError:
        return CorruptRecordError(f"not a v1 experience record: {why}")

    try:
        raw = msgpack.unpackb(base64.b64decode(header, validate=True), raw=False)
    except (binascii.Error, ValueError, msgpack.UnpackException) as err:
        raise corrupt(f"undecodable metadata ({err})") from err
    if not isinstance(raw, dict):
        raise corrupt("the metadata is not a map")
    if raw.get("v") != RECORD_VERSION:
        raise corrupt(f"version {raw.get('v')!r}")
    meta: Dict[str, Any] = {"v": RECORD_VERSION}
    for key in _STR_FIELDS:
        if not isinstance(raw.get(key), str):
            raise corrupt(f"{key} is not a string")
        meta[key] = raw[key]
    for key, minimum in _INT_FIELDS.items():
        n = _int(raw.get(key))
        if n is None or n < minimum:
            raise corrupt(f"{key} is not an integer >= {minimum}")
        meta[key] = n
    for key in ("reward", "createdAt", "completedAt", "priority"):
        x = _finite(raw.get(key))
        if x is None or (key == "priority" and x < 0):
            raise corrupt(f"{key} is not a number")
        meta[key] = x
    rollout_id = raw.get("rolloutId")
    if rollout_id is not None:
        if not isinstance(rollout_id, str):
            raise corrupt("rolloutId is not a string")
        meta["rolloutId"] = rollout_id
    info = raw.get("info")
    if info is not None:
        if not isinstance(info, dict) or not all(isinstance(k, str) and (isinstance(v, (str, bool)) or _finite(v) is not None) for k, v in info.items()):
            raise corrupt("info is not a record of strings, numbers and booleans")
        meta["info"] = info
    seqs = raw.get("chunkSeqs")
    if not isinstance(seqs, list):
        raise corrupt("chunkSeqs is not an array")
    chunk_seqs: List[int] = []
    for s in seqs:
        n = _int(s)
        if n is None or n < 1:
            raise corrupt("chunkSeqs holds something other than positive integers")
        chunk_seqs.append(n)
    meta["chunkSeqs"] = chunk_seqs
    # In the record's own key order (the writer's), so that re-encoding gives the same bytes.
    return {k: meta[k] for k in raw if k in meta}


def trajectory_of(meta: Dict[str, Any], tokens: Any, logprobs: Any) -> Trajectory:
    """The stored trajectory of a decoded record and its payload."""
    return Trajectory(
        id=meta["id"],
        prompt_id=meta["promptId"],
        group_id=meta["groupId"],
        sample_index=meta["sampleIndex"],
        group_size=meta["groupSize"],
        weight_version=meta["weightVersion"],
        reward=meta["reward"],
        tokens=tokens,
        logprobs=logprobs,
        prompt_length=meta["promptLength"],
        response_length=meta["responseLength"],
        created_at=meta["createdAt"],
        completed_at=meta["completedAt"],
        rollout_id=meta.get("rolloutId"),
        priority=meta["priority"],
        info=meta.get("info"),
    )
