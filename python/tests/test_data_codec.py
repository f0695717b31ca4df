"""The Python side of the record codec beyond the shared vectors: random inputs encoded by both
languages (the TypeScript encoder run from dist/), the input forms only Python has (numpy
arrays of any dtype, torch tensors, snake_case names, `Trajectory`), and JavaScript's number
printing. No server."""

from __future__ import annotations

import base64
import math
import random
import struct
from typing import Any, Dict, List

import numpy as np
import pytest
import torch
from experience_support import load_vectors, node, trajectory_input

from laminar import error_codes
from laminar.data import DataInputError, Trajectory, validate_trajectory
from laminar.data.codec import decode_meta, decode_payload, encode_meta, encode_payload, join_chunks, meta_of, split_payload
from laminar.data.codec.js_values import js_json_size, js_key_order, js_number_string
from laminar.data.codec.msgpack_js import pack_js
from laminar.data.errors import CorruptRecordError
from laminar.data.experience import buffer_names
from laminar.data.ids import id_token, token_to_id, trajectory_id_of_subject

VECTORS = {c["name"]: c for c in load_vectors()["valid"]}


def record_of(t: Any) -> Dict[str, str]:
    v = validate_trajectory(t)
    return {
        "subject": buffer_names().record_subject(v.id),
        "metaHeader": encode_meta(meta_of(v, [])),
        "payload": base64.b64encode(encode_payload(v.tokens, v.logprobs)).decode(),
    }


# --- random inputs, both encoders --------------------------------------------------------------

_BOUNDARIES = [
    0,
    1,
    31,
    32,
    127,
    128,
    255,
    256,
    65535,
    65536,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**53 - 1,
    -1,
    -32,
    -33,
    -128,
    -129,
    -32768,
    -32769,
    -(2**31),
    -(2**31) - 1,
]
_ALPHABET = 'aZ09._-/ *>#é€😀\u0000\t"\\'


def _random_string(rng: random.Random, max_len: int) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, max_len)))


def _random_id(rng: random.Random, max_len: int) -> str:
    """A valid id: no control characters, no whitespace at either end (the refused ones are in the vectors)."""
    text = "".join(rng.choice(_ALPHABET.replace("\u0000", "").replace("\t", "")) for _ in range(rng.randint(1, max_len)))
    return text.strip(" ") or "x"


def _random_number(rng: random.Random) -> float:
    kind = rng.randrange(5)
    if kind == 0:
        return rng.choice(_BOUNDARIES)
    if kind == 1:
        return float(rng.choice(_BOUNDARIES))  # integral floats must pack as ints
    if kind == 2:
        return rng.uniform(-1e6, 1e6)
    if kind == 3:
        x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        return x if math.isfinite(x) else 0.5
    return rng.random() * 10 ** rng.randint(-30, 30)


def _random_input(rng: random.Random, i: int) -> Dict[str, Any]:
    n = rng.choice([0, 1, 3, 17, 200])
    group_size = rng.choice([1, 2, 8, 128, 300])
    t: Dict[str, Any] = {
        "id": f"{i}-{_random_id(rng, 40)}",
        "promptId": _random_id(rng, 60),
        "groupId": _random_id(rng, 20),
        "sampleIndex": rng.randrange(group_size),
        "groupSize": group_size,
        "weightVersion": rng.choice([0, 1, 127, 128, 65536, 2**32, 2**40]),
        "reward": _random_number(rng),
        "tokens": [rng.randint(-(2**31), 2**31 - 1) for _ in range(n)],
        "logprobs": [rng.uniform(-30, 0) for _ in range(n)],
        "promptLength": n // 2,
        "responseLength": n - n // 2,
        "createdAt": rng.choice([1_700_000_000_000 + i, 1.5, 0, 2**32 - 1]),
        "completedAt": _random_number(rng),
    }
    if rng.random() < 0.5:
        t["rolloutId"] = _random_string(rng, 30)
    if rng.random() < 0.5:
        t["priority"] = abs(_random_number(rng))
    if rng.random() < 0.7:
        keys = [_random_string(rng, 8) for _ in range(rng.randint(0, 6))] + [str(rng.choice([0, 1, 7, 42, 4294967294, 4294967295])) for _ in range(2)]
        t["info"] = {k: rng.choice([_random_number(rng), rng.random() < 0.5, _random_string(rng, 12)]) for k in keys}
    return t


def test_random_inputs_encode_to_the_same_bytes_in_both_languages() -> None:
    rng = random.Random(25)
    inputs = [_random_input(rng, i) for i in range(300)]
    expected = node("encode", stdin=inputs)
    for t, want in zip(inputs, expected):
        assert "error" not in want, (t, want)
        assert record_of(t) == want, t["id"]


def test_number_printing_is_javascripts() -> None:
    rng = random.Random(7)
    xs: List[float] = [0.1, 1e21, 1e-7, 1e-6, 2.0**60, 1 / 3, 5e-324, 1.7976931348623157e308, 123e-20, -0.5, 100.0]
    for _ in range(2000):
        x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(x):
            xs.append(x)
        xs.append(rng.random() * 10 ** rng.randint(-25, 25))
    assert [js_number_string(x) for x in xs] == node("js-strings", stdin=xs)


# --- what only Python hands a writer -----------------------------------------------------------


def test_numpy_arrays_of_any_dtype_and_torch_tensors_give_the_same_record_as_lists() -> None:
    base = trajectory_input(3, tokens=12)
    want = record_of(base)
    tokens, logprobs = base["tokens"], base["logprobs"]
    forms = [
        (np.asarray(tokens, dtype=np.int32), np.asarray(logprobs, dtype=np.float32)),
        (np.asarray(tokens, dtype=np.int64), np.asarray(logprobs, dtype=np.float64)),
        (np.asarray(tokens, dtype=np.uint32), np.asarray(logprobs, dtype=">f4")),
        (np.asarray(tokens, dtype=">i4"), np.asarray(logprobs, dtype=np.float32)[::1]),
        (np.asarray(tokens, dtype=np.float64), np.asarray(logprobs, dtype=np.float32)),
        (np.repeat(np.asarray(tokens, dtype=np.int32), 2)[::2], np.repeat(np.asarray(logprobs, dtype=np.float32), 3)[::3]),  # strided views
        (torch.tensor(tokens, dtype=torch.int64), torch.tensor(logprobs, dtype=torch.float32)),
        (torch.tensor(tokens, dtype=torch.int32), torch.tensor(logprobs, dtype=torch.float64)),
        (tuple(tokens), tuple(logprobs)),
        ([float(x) for x in tokens], logprobs),  # integral floats are token ids
    ]
    for tok, lp in forms:
        assert record_of({**base, "tokens": tok, "logprobs": lp}) == want, (type(tok), getattr(tok, "dtype", None))


def test_bfloat16_logprobs_are_widened_exactly() -> None:
    lp = torch.tensor([-0.5, -1.25, -3.0, -0.0078125], dtype=torch.bfloat16)
    t = validate_trajectory({**trajectory_input(1, tokens=4), "logprobs": lp})
    assert t.logprobs.dtype == np.float32
    np.testing.assert_array_equal(t.logprobs, lp.float().numpy())


def test_python_names_and_trajectory_objects_give_the_same_record() -> None:
    wire = trajectory_input(5, tokens=8, priority=0.25)
    want = record_of(wire)
    snake = {
        "id": wire["id"],
        "prompt_id": wire["promptId"],
        "group_id": wire["groupId"],
        "sample_index": wire["sampleIndex"],
        "group_size": wire["groupSize"],
        "weight_version": wire["weightVersion"],
        "reward": wire["reward"],
        "tokens": wire["tokens"],
        "logprobs": wire["logprobs"],
        "prompt_length": wire["promptLength"],
        "response_length": wire["responseLength"],
        "created_at": wire["createdAt"],
        "completed_at": wire["completedAt"],
        "rollout_id": wire["rolloutId"],
        "priority": wire["priority"],
        "info": wire["info"],
    }
    assert record_of(snake) == want
    assert record_of(Trajectory(**snake)) == want
    assert record_of(validate_trajectory(wire)) == want  # a validated Trajectory validates again the same
    assert Trajectory(**snake).to_dict().keys() == wire.keys()


def test_info_keys_are_ordered_as_javascript_orders_them_whatever_the_insertion_order() -> None:
    case = VECTORS["info keys in JavaScript order: array indices first, ascending, then the rest as given"]
    info = case["input"]["info"]
    # The array indices anywhere; the other keys in their order.
    shuffled = {k: info[k] for k in ["b", "4294967294", "01", "2", "-1", "4294967295", "1", "a"]}
    assert list(shuffled) != list(info)
    assert record_of({**case["input"], "info": shuffled})["metaHeader"] == case["metaHeader"]
    assert js_key_order(["b", "10", "2", "x", "02", "1"]) == ["1", "2", "10", "b", "x", "02"]


def test_integral_floats_pack_as_msgpackr_packs_the_same_javascript_number() -> None:
    assert pack_js(1.0) == pack_js(1) == b"\x01"
    assert pack_js(-0.0) == b"\x00"
    assert pack_js(2.0**32) == pack_js(2**32) == b"\xcb" + struct.pack(">d", 2.0**32)
    assert pack_js(-(2**31)) == b"\xd2\x80\x00\x00\x00"
    assert pack_js(-(2**31) - 1) == b"\xcb" + struct.pack(">d", -(2.0**31) - 1)
    assert pack_js({}) == b"\xde\x00\x00"  # msgpackr: always map16
    assert pack_js({"a": True}) == b"\xde\x00\x01\xa1a\xc3"


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (np.array([1, 2**31], dtype=np.int64), "token ids must be int32"),
        (np.array([1, -(2**31) - 1], dtype=np.int64), "token ids must be int32"),
        (np.array([1, 2**32 - 1], dtype=np.uint32), "token ids must be int32"),
        (np.array([1.5, 2.0]), "token ids must be integral"),
        (np.array([np.nan, 2.0]), "token ids must be integral"),
        (np.array([[1, 2]], dtype=np.int32), "expected a 1-D array"),
        (np.array([True, False]), "dtype bool"),
        (torch.tensor([1, 2**40]), "token ids must be int32"),
        (np.array(["1", "2"]), "dtype <U1"),
        ("12", "Invalid input"),
        ({1, 2}, "Invalid input"),
    ],
)
def test_token_arrays_that_do_not_fit_int32_are_refused(tokens: Any, message: str) -> None:
    with pytest.raises(DataInputError) as caught:
        validate_trajectory({**trajectory_input(1, tokens=2), "tokens": tokens})
    assert caught.value.code == error_codes.BAD_TRAJECTORY
    assert message in caught.value.message
    assert caught.value.details["issues"][0]["path"] == "tokens"


def test_a_field_given_under_both_names_is_refused() -> None:
    t = {**trajectory_input(1), "prompt_id": "other"}
    with pytest.raises(DataInputError) as caught:
        validate_trajectory(t)
    assert caught.value.code == error_codes.BAD_TRAJECTORY
    assert caught.value.details["issues"] == [{"path": "promptId", "message": "Invalid input: given twice, as promptId and prompt_id"}]


def test_python_only_values_are_refused_with_a_typed_error() -> None:
    for over, path in [
        ({"id": "a\ud800b"}, "id"),  # a lone surrogate has no UTF-8
        ({"info": {1: "x"}}, "info"),  # keys are strings in a record
        ({"info": {"a": {"nested": 1}}}, "info.a"),
        ({"reward": 10**400}, "reward"),  # beyond a double
        ({"sampleIndex": np.int64(2**60)}, "sampleIndex"),
        ({"logprobs": np.array([[0.0] * 16])}, "logprobs"),
    ]:
        with pytest.raises(DataInputError) as caught:
            validate_trajectory({**trajectory_input(1), **over})
        assert caught.value.code == error_codes.BAD_TRAJECTORY, over
        assert caught.value.details["issues"][0]["path"] == path, over


def test_numpy_scalars_are_numbers() -> None:
    t = validate_trajectory(trajectory_input(2, sampleIndex=np.int64(1), reward=np.float32(0.5), info={"a": np.float64(0.25), "b": np.int32(3)}))
    assert (t.sample_index, t.reward, t.info) == (1, 0.5, {"a": 0.25, "b": 3})


def test_timestamps_default_to_now_in_milliseconds() -> None:
    t = trajectory_input(1)
    del t["createdAt"], t["completedAt"]
    v = validate_trajectory(t, now_ms=1_234_567)
    assert v.created_at == v.completed_at == 1_234_567
    assert abs(validate_trajectory(t).created_at / 1000 - __import__("time").time()) < 60


def test_info_size_counts_json_as_javascript_writes_it() -> None:
    # Python's json.dumps writes 1e21 as 1e+21 too, but 1.0 as "1.0" and 2**60 as an exact integer.
    assert js_json_size({"a": 1.0, "b": 2.0**60, "c": 1e21, "d": "é"}) == len('{"a":1,"b":1152921504606847000,"c":1e+21,"d":"é"}'.encode())


# --- payload and metadata helpers ------------------------------------------------------------


def test_payload_round_trip_and_chunks() -> None:
    tokens = np.arange(1000, dtype=np.int32)
    logprobs = -np.arange(1000, dtype=np.float32) / 7
    payload = encode_payload(tokens, logprobs)
    parts = split_payload(payload, 3000)
    assert [len(p) for p in parts] == [3000, 3000, 2000]
    t, lp = decode_payload(join_chunks(parts, 8000), 1000)
    np.testing.assert_array_equal(t, tokens)
    np.testing.assert_array_equal(lp, logprobs)
    with pytest.raises(ValueError):
        decode_payload(payload[:-1], 1000)
    with pytest.raises(ValueError):
        join_chunks(parts[:2], 8000)


@pytest.mark.parametrize("header", ["bm90IG1zZ3BhY2s=", "not base64!", base64.b64encode(pack_js({"v": 2})).decode(), base64.b64encode(pack_js([1])).decode()])
def test_a_header_that_is_not_a_v1_record_is_corrupt(header: str) -> None:
    with pytest.raises(CorruptRecordError) as caught:
        decode_meta(header)
    assert caught.value.code == error_codes.CORRUPT_RECORD


def test_ids_become_one_subject_token_and_back() -> None:
    for id in ["a", "q.1/a b*c>d#0/é😀", "x" * 256, "\u0000"]:
        token = id_token(id)
        assert "." not in token and "*" not in token and ">" not in token and "=" not in token
        assert token_to_id(token) == id
        assert trajectory_id_of_subject(buffer_names("b").record_subject(id)) == id
