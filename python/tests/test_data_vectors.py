"""The Python codec against the shared vectors (test/vectors/trajectories.json, written by
scripts/trajectory-vectors.mjs from the TypeScript encoder; test/data/vectors.test.ts holds the
TypeScript side to the same file): the same inputs give the same subject, `Laminar-Meta` header,
payload and chunks, byte for byte, and the same bad inputs the same code, message and details."""

from __future__ import annotations

import base64

import pytest
from experience_support import load_vectors

from laminar import error_codes
from laminar.data.codec import (
    HEADER_ROOM,
    chunk_limit,
    decode_meta,
    encode_meta,
    encode_payload,
    meta_of,
    split_payload,
    trajectory_of,
    validate_trajectory,
    check_payload_size,
)
from laminar.data.experience import buffer_names, chunk_msg_id
from laminar.data.experience.writer import _msg_id
from laminar.errors import LaminarError

VECTORS = load_vectors()


def test_the_vectors_cover_the_format() -> None:
    assert VECTORS["headerRoom"] == HEADER_ROOM
    assert len(VECTORS["valid"]) >= 20 and len(VECTORS["invalid"]) >= 40
    assert any("chunks" in c for c in VECTORS["valid"])
    codes = {c["error"]["code"] for c in VECTORS["invalid"]}
    assert codes == {
        error_codes.BAD_TRAJECTORY,
        error_codes.LENGTH_MISMATCH,
        error_codes.NEGATIVE_LENGTH,
        error_codes.GROUP_MISMATCH,
        error_codes.FUTURE_VERSION,
        error_codes.PAYLOAD_TOO_LARGE,
        error_codes.BAD_SEGMENTS,
        error_codes.SEGMENT_LENGTHS,
        error_codes.OBSERVATION_LOGPROB,
        error_codes.TOO_MANY_SEGMENTS,
    }
    # Both record versions: v1 (no segments, as written before segments) and v2.
    assert {decode_meta(c["metaHeader"])["v"] for c in VECTORS["valid"]} == {1, 2}


@pytest.mark.parametrize("case", VECTORS["valid"], ids=lambda c: c["name"])
def test_a_valid_input_becomes_the_same_record(case: dict) -> None:
    context = case.get("context", {})
    t = validate_trajectory(case["input"], max_weight_version=context.get("maxWeightVersion"))
    if "maxTrajectoryBytes" in context:
        check_payload_size(t, context["maxTrajectoryBytes"])
    names = buffer_names()
    payload = encode_payload(t.tokens, t.logprobs)
    chunks = case.get("chunks", [])
    assert names.record_subject(t.id) == case["subject"]
    assert _msg_id(t.id) == case["msgId"].strip()
    assert encode_meta(meta_of(t, [c["seq"] for c in chunks])) == case["metaHeader"]
    if "maxPayload" in case:
        limit = chunk_limit(case["maxPayload"])
        assert (len(payload) > limit) == bool(chunks)
    if chunks:
        assert case["payload"] == ""
        assert names.chunk_subject(t.id) == case["chunkSubject"]
        parts = split_payload(payload, chunk_limit(case["maxPayload"]))
        assert [base64.b64encode(p).decode() for p in parts] == [c["payload"] for c in chunks]
        assert [chunk_msg_id(t.id, i) for i in range(len(parts))] == [c["msgId"] for c in chunks]
    else:
        assert base64.b64encode(payload).decode() == case["payload"]


@pytest.mark.parametrize("case", VECTORS["valid"], ids=lambda c: c["name"])
def test_a_header_decodes_to_the_metadata_it_was_made_of(case: dict) -> None:
    t = validate_trajectory(case["input"])
    meta = meta_of(t, [c["seq"] for c in case.get("chunks", [])])
    decoded = decode_meta(case["metaHeader"])
    assert decoded == meta
    assert encode_meta(decoded) == case["metaHeader"]
    assert decoded["v"] == (1 if t.segments is None else 2)
    assert trajectory_of(decoded, t.tokens, t.logprobs).segments == t.segments


@pytest.mark.parametrize("case", VECTORS["invalid"], ids=lambda c: c["name"])
def test_an_invalid_input_gets_the_same_error(case: dict) -> None:
    context = case.get("context", {})
    with pytest.raises(LaminarError) as caught:
        t = validate_trajectory(case["input"], max_weight_version=context.get("maxWeightVersion"))
        check_payload_size(t, context.get("maxTrajectoryBytes", 64 * 1024 * 1024))
    err = caught.value
    assert (err.code, err.message) == (case["error"]["code"], case["error"]["message"])
    assert err.details == case["error"].get("details")


@pytest.mark.parametrize("case", VECTORS["bufferNames"], ids=lambda c: repr(c["buffer"]))
def test_buffer_names(case: dict) -> None:
    if "error" in case:
        with pytest.raises(LaminarError) as caught:
            buffer_names(case["buffer"])
        assert (caught.value.code, caught.value.message) == (case["error"]["code"], case["error"]["message"])
        return
    names = buffer_names(case["buffer"])
    assert (names.stream, names.record_filter, names.all_filter) == (case["stream"], case["recordFilter"], case["allFilter"])
    assert (names.record_subject("x"), names.chunk_subject("x")) == (case["recordSubject"], case["chunkSubject"])
    assert (names.done_stream, names.done_subject("x")) == (case["doneStream"], case["doneSubject"])
