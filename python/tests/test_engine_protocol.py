"""The reference engine's /generate body checks (protocol.py): the fast path that reads a context's
types and bounds in C answers exactly as the per-token checks did."""

from __future__ import annotations

import json

import pytest

from laminar.testing.engine.protocol import InvalidRequest, SchemaError, parse_generate


def body(input_ids: object, **sampling: object) -> dict:
    # Through JSON, as the server reads it.
    return json.loads(json.dumps({"input_ids": input_ids, "sampling_params": {"max_new_tokens": 4, **sampling}, "stream": True}))


def test_a_context_of_token_ids_is_taken_as_sent() -> None:
    ids = [i % 22 for i in range(300)]
    parsed = parse_generate(body(ids, stop_token_ids=[17, 3]), vocab_size=22)
    assert parsed.input_ids == ids
    assert parsed.sampling.stop_token_ids == frozenset({17, 3})


@pytest.mark.parametrize("bad", [[1, 2, True], [1, 2.0], [1, "2"], [1, None], "1 2 3", [1, [2]]])
def test_anything_but_a_list_of_integers_is_refused(bad: object) -> None:
    with pytest.raises((SchemaError, InvalidRequest)):
        parse_generate(body(bad), vocab_size=22)


def test_a_bool_in_a_list_of_stop_ids_is_refused() -> None:
    with pytest.raises(SchemaError, match="stop_token_ids must be a list of integers"):
        parse_generate(body([1, 2], stop_token_ids=[17, False]), vocab_size=22)


@pytest.mark.parametrize("bad,named", [([1, 22, 3], 22), ([5, -1], -1), ([0, 21, 40, 22], 40)])
def test_the_first_id_outside_the_vocabulary_is_named(bad: list[int], named: int) -> None:
    with pytest.raises(InvalidRequest, match=rf"holds token id {named}, outside the vocabulary \[0, 22\)"):
        parse_generate(body(bad), vocab_size=22)


def test_an_empty_context_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="input_ids is empty"):
        parse_generate(body([]), vocab_size=22)
