"""The lookup task (laminar.testing.tools) and the reference engine's chat template: the tool
role an observation is tokenized in, pure and over a real engine process's /tokenize."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from engine_process import EngineProcess

from laminar.errors import LaminarError
from laminar.testing import TinyLMConfig
from laminar.testing import tools
from laminar.testing.digits import BOS, EOS, SEP, DIGIT_BASE
from laminar.testing.engine.chat_template import chat_template_ids, parse_messages, vocabulary_of
from laminar.testing.engine.protocol import InvalidRequest, SchemaError


def d(s: str) -> list[int]:
    return [DIGIT_BASE + int(c) for c in s]


def test_lookup_is_fnv_digits_and_refuses_non_digits() -> None:
    # The action service's lookup tool (src/actions/executors/lookup.ts) answers the same digits.
    assert tools.lookup_value("314") == "6543"
    assert tools.lookup_value("0000") == "2143"
    assert tools.lookup_value("314", 2) == "65"
    with pytest.raises(LaminarError):
        tools.lookup_value("3a")


def test_prompt_payload_carries_the_call_the_answer_and_the_limits() -> None:
    p = tools.make_prompt("314")
    value = tools.lookup_value("314")
    assert p.input_ids == [BOS, tools.LOOKUP, *d("314"), SEP]
    assert p.call == [tools.TOOL_CALL, tools.LOOKUP, *d("314"), tools.TOOL_CALL_END]
    payload = p.payload()
    assert payload["target"] == d(value)
    assert payload["max_new_tokens"] == 6 + 4 + 1
    assert payload["stop_token_ids"] == [EOS, tools.TOOL_CALL_END]
    assert payload["max_turns"] == tools.MAX_TURNS
    assert tools.decode(p.call) == "<tool_call> lookup 3 1 4 </tool_call>"


def test_reward_halves_the_call_and_the_answer() -> None:
    p = tools.make_prompt("314")
    answer = [*p.target, EOS]
    assert tools.reward([p.call, answer], p.call, p.target) == 1.0
    assert tools.reward([p.call], p.call, p.target) == 0.5  # called, never answered
    assert tools.reward([answer], p.call, p.target) == 0.0  # answered without calling
    half_call = [tools.TOOL_CALL, tools.LOOKUP, *d("399"), tools.TOOL_CALL_END]
    assert tools.reward([half_call, answer], p.call, p.target) == pytest.approx((4 / 6 + 1) / 2)
    assert tools.reward([p.call, [EOS, *p.target]], p.call, p.target) == 0.5  # EOS first: nothing answered
    assert tools.reward([], p.call, p.target) == 0.0
    with pytest.raises(LaminarError):
        tools.reward([p.call], [], p.target)


def test_prompt_lines_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert tools.main(["prompts", "--count", "3", "--seed", "5", "--n", "4"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["id"] for line in lines] == ["lookup-5-0", "lookup-5-1", "lookup-5-2"]
    assert all(line["n"] == 4 and line["payload"]["task"] == "lookup" for line in lines)
    assert lines == [json.loads(line) for line in _lines(5)], "the same seed gives the same prompts"


def _lines(seed: int) -> list[str]:
    import io

    out = io.StringIO()
    tools.write_prompt_lines(out, tools.random_prompts(3, seed), seed, 4)
    return out.getvalue().splitlines()


def test_chat_template_tool_role() -> None:
    vocab = vocabulary_of(tools.VOCAB_SIZE)
    assert vocab is tools.TOOLS_VOCAB and vocabulary_of(16) is not None and vocabulary_of(17) is None
    assert chat_template_ids([{"role": "tool", "content": "6543"}], vocab, False, True) == [tools.TOOL, *d("6543"), tools.TOOL_END]
    assert chat_template_ids([{"role": "tool", "content": "error"}], vocab, False, True) == [tools.TOOL, tools.ERROR, tools.TOOL_END]
    convo = [{"role": "user", "content": "lookup 314"}, {"role": "assistant", "content": "6543"}]
    assert chat_template_ids(convo, vocab, True, False) == [BOS, tools.LOOKUP, *d("314"), SEP, *d("6543"), EOS]
    with pytest.raises(InvalidRequest):
        chat_template_ids([{"role": "tool", "content": "1"}], vocabulary_of(16), False, False)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        chat_template_ids([{"role": "system", "content": "1"}], vocab, False, False)
    with pytest.raises(InvalidRequest):
        chat_template_ids([{"role": "tool", "content": "x"}], vocab, False, False)
    with pytest.raises(SchemaError):
        parse_messages([{"role": "tool", "content": 3}])
    with pytest.raises(SchemaError):
        parse_messages([])


def test_engine_tokenizes_an_observation_in_the_tool_role(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TinyLMConfig(vocab_size=tools.VOCAB_SIZE, d_model=32, n_layers=1, n_heads=2, max_seq_len=32).to_json()))
    engine = EngineProcess(["--random-init", "--config", str(config)]).start()

    async def check() -> None:
        async with aiohttp.ClientSession() as s:

            async def post(body: object) -> tuple[int, dict]:
                async with s.post(engine.url + "/tokenize", json=body) as r:
                    return r.status, await r.json()

            status, body = await post({"messages": [{"role": "tool", "content": "6543"}], "add_generation_prompt": True})
            assert (status, body["tokens"]) == (200, [tools.TOOL, *d("6543"), tools.TOOL_END])
            assert (await post({"prompt": "lookup 314 <sep>"}))[1]["tokens"] == [BOS, tools.LOOKUP, *d("314"), SEP]
            assert (await post({"messages": [{"role": "tool"}]}))[0] == 400
            assert (await post({"messages": [{"role": "critic", "content": "1"}]}))[0] == 400

    try:
        asyncio.run(check())
    finally:
        assert engine.stop() == 0, "\n".join(engine.logs)
