"""Trajectory segments in the Python client (laminar.data.codec.segments, builder), without
servers: for any sequence of turns the loss mask and turn boundaries agree with the tokens the
builder laid out and the record header keeps the segments; a record from before segments (v1)
reads as one generated segment; bad turns get the writer's typed errors. Byte compatibility
with TypeScript is test_data_vectors.py's."""

from __future__ import annotations

import base64
from typing import Any, List, Tuple

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laminar import error_codes
from laminar.data import TrajectoryBuilder, loss_mask_of, turn_boundaries_of
from laminar.data.codec import decode_meta, encode_meta, meta_of, trajectory_of, validate_trajectory
from laminar.errors import LaminarError

Turn = Tuple[str, List[int], int]
turns_strategy = st.lists(
    st.tuples(st.sampled_from(["generated", "observation"]), st.lists(st.integers(0, 50_000), max_size=12), st.integers(0, 20)),
    min_size=1,
    max_size=20,
)
FIELDS = dict(id="t", prompt_id="p", group_id="g", sample_index=0, group_size=1, reward=1.0)


def build(prompt: List[int], turns: List[Turn]) -> Any:
    b = TrajectoryBuilder(prompt)
    for i, (kind, tokens, version) in enumerate(turns):
        if kind == "generated":
            b.add_generated(tokens, [-(x % 7) - 0.5 for x in tokens], weight_version=version, finish_reason="tool_call")
        else:
            b.add_observation(tokens, tool="lookup", action_id=f"a-{i}", status="ok", latency_ms=i * 1.5)
    return validate_trajectory(b.build(**FIELDS, weight_version=0))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=6), turns_strategy)
def test_mask_and_boundaries_agree_with_every_turn(prompt: List[int], turns: List[Turn]) -> None:
    t = build(prompt, turns)
    mask = loss_mask_of(t.prompt_length, t.response_length, t.segments)
    bounds = turn_boundaries_of(t.prompt_length, t.response_length, t.segments)
    assert mask.dtype == np.uint8 and len(mask) == len(t.tokens)
    assert bounds[0] == len(prompt) and bounds[-1] == len(t.tokens) and len(bounds) == len(turns) + 1
    assert not mask[: len(prompt)].any()
    for i, (kind, tokens, _) in enumerate(turns):
        a, b = bounds[i], bounds[i + 1]
        assert t.tokens[a:b].tolist() == tokens
        assert mask[a:b].tolist() == [1 if kind == "generated" else 0] * len(tokens)
        if kind == "observation":
            assert not t.logprobs[a:b].any()
    meta = decode_meta(encode_meta(meta_of(t, [])))
    assert meta["v"] == 2
    assert trajectory_of(meta, t.tokens, t.logprobs).segments == t.segments


def test_the_weight_version_defaults_to_the_oldest_turn() -> None:
    b = TrajectoryBuilder([1])
    b.add_generated([2], [-1.0], weight_version=7, finish_reason="tool_call")
    b.add_observation([3], tool="x", action_id="a", status="ok", latency_ms=1)
    b.add_generated([4], [-1.0], weight_version=5, finish_reason="stop")
    assert b.build(**FIELDS).weight_version == 5
    assert b.turns == 2 and b.tokens.tolist() == [1, 2, 3, 4]
    again = TrajectoryBuilder.resume([1], b.tokens[1:], np.array([-1.0, 0.0, -1.0], dtype=np.float32), b.segments)
    assert again.segments == b.segments and again.tokens.tolist() == b.tokens.tolist()


def test_a_record_from_before_segments_reads_as_one_generated_segment() -> None:
    v1 = {
        "v": 1,
        "id": "old",
        "promptId": "p",
        "groupId": "g",
        "sampleIndex": 0,
        "groupSize": 1,
        "weightVersion": 2,
        "reward": 1,
        "tokenCount": 5,
        "promptLength": 2,
        "responseLength": 3,
        "createdAt": 1,
        "completedAt": 2,
        "priority": 1,
        "bytes": 40,
        "chunkSeqs": [],
    }
    header = base64.b64encode(msgpack.packb(v1)).decode()
    meta = decode_meta(header)
    assert "segments" not in meta
    t = trajectory_of(meta, np.arange(5, dtype=np.int32), np.zeros(5, dtype=np.float32))
    assert t.segments is None
    assert loss_mask_of(t.prompt_length, t.response_length, t.segments).tolist() == [0, 0, 1, 1, 1]
    assert turn_boundaries_of(2, 3) == [2, 5]
    for bad in ({**v1, "segments": [[0, 3, 2, "stop"]]}, {**v1, "v": 2}, {**v1, "v": 3}):
        with pytest.raises(LaminarError) as caught:
            decode_meta(base64.b64encode(msgpack.packb(bad)).decode())
        assert caught.value.code == error_codes.CORRUPT_RECORD


def test_bad_turns_are_refused_with_codes() -> None:
    b = TrajectoryBuilder([1])
    with pytest.raises(LaminarError) as caught:
        b.add_generated([1, 2], [0.0], weight_version=1, finish_reason="stop")
    assert caught.value.code == error_codes.BAD_APPEND
    b.add_observation([5], tool="x", action_id="a", status="ok", latency_ms=0)
    with pytest.raises(LaminarError) as caught:
        b.build(**FIELDS)
    assert caught.value.code == error_codes.BAD_SEGMENTS
    b.add_observation([6], tool="x", action_id="b", status="done", latency_ms=0)
    with pytest.raises(LaminarError) as caught:
        validate_trajectory(b.build(**FIELDS, weight_version=1))
    assert (caught.value.code, caught.value.message) == (
        error_codes.BAD_SEGMENTS,
        "invalid segments: segments.1.action.status: expected one of ok, error, timeout, failed, truncated, bad_call",
    )
