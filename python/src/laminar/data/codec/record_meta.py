"""The metadata of a stored trajectory, as src/data/codec/record-meta.ts: carried in the
`Laminar-Meta` header of its record message as base64(msgpack) with a version field, so that
the sampler indexes records from headers alone.

The keys are written in the TypeScript order with the absent optionals (``rolloutId``,
``info``, ``segments``) left out, and packed as msgpackr packs them (msgpack_js.py), so that a
record from Python is the same bytes as one from TypeScript.

Version 2 adds ``segments`` (a multi-turn trajectory's turns and observations, in their compact
wire form: segments.py). A trajectory without segments is still written as version 1, so that
every reader reads single-turn records; a v1 record reads as one generated segment.
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
from .segments import ACTION_STATUSES, from_wire, to_wire
from .trajectory import Trajectory, payload_bytes

META_HEADER = "Laminar-Meta"
RECORD_VERSION = 2
"""The newest record version: what a record with segments is written as."""
SINGLE_TURN_RECORD_VERSION = 1
"""What a record without segments is written as (readable by every reader)."""


def meta_of(t: Trajectory, chunk_seqs: Sequence[int]) -> Dict[str, Any]:
    """The record metadata of a validated trajectory, keys in the record's order."""
    meta: Dict[str, Any] = {
        "v": SINGLE_TURN_RECORD_VERSION if t.segments is None else RECORD_VERSION,
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
    if t.segments is not None:
        meta["segments"] = t.segments
    meta["bytes"] = payload_bytes(t)
    meta["chunkSeqs"] = list(chunk_seqs)
    return meta


def encode_meta(meta: Dict[str, Any]) -> str:
    """The `Laminar-Meta` header value: base64 of msgpackr's bytes (segments in wire form)."""
    if "segments" in meta:
        meta = {k: (to_wire(v) if k == "segments" else v) for k, v in meta.items()}
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
    that is not a v1 or v2 record (a v1 record with segments, a v2 one without). Integral
    numbers come back as int, the others as float; unknown keys are dropped (as zod drops
    them); segments come back as dicts (segments.py)."""

    def corrupt(why: str) -> CorruptRecordError:
        return CorruptRecordError(f"not a v1 or v2 experience record: {why}")

    try:
        raw = msgpack.unpackb(base64.b64decode(header, validate=True), raw=False)
    except (binascii.Error, ValueError, msgpack.UnpackException) as err:
        raise corrupt(f"undecodable metadata ({err})") from err
    if not isinstance(raw, dict):
        raise corrupt("the metadata is not a map")
    version = raw.get("v")
    if type(version) is not int or version not in (SINGLE_TURN_RECORD_VERSION, RECORD_VERSION):
        raise corrupt(f"version {version!r}")
    if ("segments" in raw) != (version == RECORD_VERSION):
        raise corrupt(f"a version {version} record {'with' if 'segments' in raw else 'without'} segments")
    meta: Dict[str, Any] = {"v": version}
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
    if "segments" in raw:
        meta["segments"] = _segments(raw["segments"], corrupt)
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


def _segments(wire: Any, corrupt: Any) -> List[Dict[str, Any]]:
    """Segments of a record header in wire form, checked as the TypeScript reader's schema does."""

    def count(v: Any) -> bool:
        n = _int(v)
        return n is not None and n >= 0

    if not isinstance(wire, list):
        raise corrupt("segments is not an array")
    for w in wire:
        ok = isinstance(w, list) and (
            (len(w) == 4 and w[0] == 0 and count(w[1]) and count(w[2]) and isinstance(w[3], str))
            or (
                len(w) == 6
                and w[0] == 1
                and count(w[1])
                and isinstance(w[2], str)
                and isinstance(w[3], str)
                and w[4] in ACTION_STATUSES
                and _finite(w[5]) is not None
                and w[5] >= 0
            )
        )
        if not ok or isinstance(w[0], bool):
            raise corrupt("segments holds something other than segments")
    # Counts as int (msgpackr writes those of 2^32 and more as float64).
    return from_wire([[w[0], _int(w[1]), _int(w[2]), w[3]] if w[0] == 0 else [w[0], _int(w[1]), *w[2:]] for w in wire])


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
        segments=meta.get("segments"),
    )
