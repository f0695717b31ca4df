"""The reference engine (python -m laminar.testing.engine) as a real process, over HTTP: the SGLang
subset of docs/reference/engine-http.md, continuous batching under a KV capacity, seeded
continuation (what repack relies on), aborts and disconnects, pause modes, weight updates from a
directory (good and refused), metrics, and bad requests.

Small models (2 layers, d_model 32) keep the module fast; `/slow_down` (SGLang's test hook) widens
the windows in which a request is still running, and conditions are polled, never slept for.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Awaitable, Callable, Iterator, Optional

import aiohttp
import pytest
import torch
from engine_process import EngineProcess
from safetensors.torch import save_file

from laminar.testing import TinyLM, TinyLMConfig, save_model
from laminar.testing import digits
from laminar.testing.model import CONFIG_FILE, WEIGHTS_FILE

SMALL = TinyLMConfig(vocab_size=16, d_model=32, n_layers=2, n_heads=2, max_seq_len=64)
PROMPT = digits.make_prompt("reverse", "31415").input_ids  # 8 tokens
SLOW = 0.05
"""Seconds per step while a test needs a request to stay running (the window it acts in)."""


def seeded_model(seed: int, config: TinyLMConfig = SMALL) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM(config)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Model directories: two good ones, and refused ones (a tensor missing, one mis-shaped, another config, no config.json)."""
    root = tmp_path_factory.mktemp("models")
    v1 = save_model(seeded_model(1), root / "v1")
    v2 = save_model(seeded_model(2), root / "v2")
    state = {k: v.clone() for k, v in seeded_model(3).state_dict().items()}

    def broken(name: str, tensors: dict[str, torch.Tensor], config: Optional[TinyLMConfig] = SMALL) -> Path:
        directory = root / name
        directory.mkdir()
        save_file(tensors, str(directory / WEIGHTS_FILE))
        if config is not None:
            (directory / CONFIG_FILE).write_text(json.dumps(config.to_json()))
        return directory

    missing = broken("missing", {k: v for k, v in state.items() if k != "layers.1.attn.qkv.weight"})
    shape = broken("shape", {**state, "lm_head.weight": torch.zeros(16, 33)})
    other = save_model(seeded_model(4, TinyLMConfig(vocab_size=16, d_model=64, n_layers=2, n_heads=2, max_seq_len=64)), root / "other")
    no_config = broken("no-config", state, config=None)
    return SimpleNamespace(v1=v1, v2=v2, missing=missing, shape=shape, other=other, no_config=no_config, nowhere=root / "nowhere")


@pytest.fixture(scope="module")
def engine(models: SimpleNamespace) -> Iterator[EngineProcess]:
    """The engine most tests share: v1 weights, version "1", room for a few requests."""
    process = EngineProcess(["--model-path", str(models.v1), "--weight-version", "1", "--kv-capacity", "256", "--max-running", "4"]).start()
    yield process
    assert process.stop() == 0, "\n".join(process.logs)


# ---- HTTP helpers ---------------------------------------------------------------------------------


class Stream:
    """An open streamed /generate, read event by event."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.chunks: list[dict[str, Any]] = []
        self.done = False

    async def next(self) -> Optional[dict[str, Any]]:
        """The next chunk, or None after `data: [DONE]`."""
        raw = await self.response.content.readuntil(b"\n\n")
        assert raw.startswith(b"data: ") and raw.endswith(b"\n\n"), raw
        data = raw[len(b"data: ") : -2]
        if data == b"[DONE]":
            self.done = True
            return None
        chunk = json.loads(data)
        self.chunks.append(chunk)
        return chunk

    async def rest(self) -> list[dict[str, Any]]:
        while await self.next() is not None:
            pass
        assert await self.response.content.read() == b""
        return self.chunks

    @property
    def last(self) -> dict[str, Any]:
        return self.chunks[-1]


async def open_stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Stream:
    response = await session.post(url + "/generate", json={**body, "stream": True})
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("text/event-stream")
    return Stream(response)


async def generate(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with session.post(url + "/generate", json=body) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def post(session: aiohttp.ClientSession, url: str, path: str, body: Any) -> tuple[int, Any]:
    async with session.post(url + path, json=body) as response:
        text = await response.text()
        return response.status, (json.loads(text) if text else None)


async def get_json(session: aiohttp.ClientSession, url: str, path: str) -> Any:
    async with session.get(url + path) as response:
        assert response.status == 200
        return await response.json()


async def metrics(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """Metric name → value, summed over label sets."""
    async with session.get(url + "/metrics") as response:
        assert response.status == 200
        text = await response.text()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = re.fullmatch(r"([^{ ]+)(?:\{[^}]*\})? (\S+)", line).groups()  # type: ignore[union-attr]
            values[name] = values.get(name, 0.0) + float(value)
    return values


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    """Polls ``check`` (a request to the engine) until it holds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


async def slow_down(session: aiohttp.ClientSession, url: str, seconds: float) -> None:
    assert (await post(session, url, "/slow_down", {"forward_sleep_time": seconds}))[0] == 200


def seeded(max_new_tokens: int, seed: int = 77, input_ids: Optional[list[int]] = None, **extra: Any) -> dict[str, Any]:
    params = {"max_new_tokens": max_new_tokens, "temperature": 1.0, "sampling_seed": seed, "ignore_eos": True}
    return {"input_ids": input_ids or PROMPT, "sampling_params": params, "return_logprob": True, **extra}


def greedy(max_new_tokens: int, **params: Any) -> dict[str, Any]:
    return {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True, **params}}


# ---- /generate -------------------------------------------------------------------------------------


async def test_streaming_format_is_sglangs(engine: EngineProcess) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.post(engine.url + "/generate", json={**seeded(12), "rid": "fmt-1", "stream": True}) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/event-stream")
            raw = await response.read()
    assert raw.endswith(b"data: [DONE]\n\n")
    events = raw.split(b"\n\n")
    assert events[-1] == b"" and events[-2] == b"data: [DONE]"
    chunks = [json.loads(e[len(b"data: ") :]) for e in events[:-2]]
    assert chunks and all(e.startswith(b"data: {") for e in events[:-2])
    previous: list[int] = []
    for chunk in chunks:
        ids, meta = chunk["output_ids"], chunk["meta_info"]
        assert ids[: len(previous)] == previous and len(ids) > len(previous)  # cumulative, growing
        previous = ids
        assert meta["id"] == "fmt-1" and meta["prompt_tokens"] == len(PROMPT) and meta["weight_version"] == "1"
        assert meta["completion_tokens"] == len(ids)
        logprobs = meta["output_token_logprobs"]
        assert [entry[1] for entry in logprobs] == ids
        assert all(isinstance(lp, float) and lp <= 0 and text is None for lp, _, text in logprobs)
        assert (meta["finish_reason"] is None) == (chunk is not chunks[-1])
    assert len(previous) == 12
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 12}


async def test_stream_interval_sends_a_chunk_every_n_tokens_the_first_and_last_always(models: SimpleNamespace) -> None:
    """--stream-interval 4, a reader faster than the engine: chunks at 1, then every 4 tokens, then the last."""
    process = EngineProcess(["--model-path", str(models.v1), "--kv-capacity", "256", "--stream-interval", "4"]).start()
    try:
        async with aiohttp.ClientSession() as s:
            assert (await get_json(s, process.url, "/get_server_info"))["stream_interval"] == 4
            # Slowed steps: each token would otherwise reach this reader in a chunk of its own.
            await slow_down(s, process.url, 0.01)
            async with s.post(process.url + "/generate", json={**seeded(14), "stream": True}) as response:
                raw = await response.read()
            await slow_down(s, process.url, 0.0)
        chunks = [json.loads(e[len(b"data: ") :]) for e in raw.split(b"\n\n")[:-2]]
        counts = [c["meta_info"]["completion_tokens"] for c in chunks]
        assert counts[0] >= 1 and counts[-1] == 14
        assert len(counts) >= 3, counts
        assert all(b - a >= 4 for a, b in zip(counts[:-2], counts[1:-1])), counts
    finally:
        assert process.stop() == 0, "\n".join(process.logs)


async def test_stop_token_ends_the_response_with_the_matched_token(engine: EngineProcess) -> None:
    async with aiohttp.ClientSession() as s:
        free = (await generate(s, engine.url, greedy(12)))["output_ids"]
        stop = free[4]
        stopped = await generate(s, engine.url, greedy(12, stop_token_ids=[stop]))
    end = free.index(stop)
    assert stopped["output_ids"] == free[: end + 1]
    assert stopped["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert "output_token_logprobs" not in stopped["meta_info"]  # return_logprob not asked


async def test_seeded_generation_continues_token_for_token_when_resent(engine: EngineProcess) -> None:
    """40 tokens in one request == 20 tokens, then prompt + those 20 resent for 20 more (repack-in)."""
    async with aiohttp.ClientSession() as s:
        whole = await generate(s, engine.url, seeded(40))
        first = await generate(s, engine.url, seeded(20))
        second = await generate(s, engine.url, seeded(20, input_ids=PROMPT + first["output_ids"]))
        # The same under load: other requests share the batches of the resent one.
        load = [asyncio.ensure_future(generate(s, engine.url, {"input_ids": PROMPT[:3], "sampling_params": {"max_new_tokens": 30}})) for _ in range(3)]
        loaded = await generate(s, engine.url, seeded(20, input_ids=PROMPT + first["output_ids"]))
        await asyncio.gather(*load)
        other_seed = await generate(s, engine.url, seeded(40, seed=78))
    tokens = whole["output_ids"]
    assert len(tokens) == 40
    assert first["output_ids"] + second["output_ids"] == tokens
    assert loaded["output_ids"] == second["output_ids"]
    resumed = first["meta_info"]["output_token_logprobs"] + second["meta_info"]["output_token_logprobs"]
    assert [t for _, t, _ in resumed] == tokens
    assert [lp for lp, _, _ in resumed] == pytest.approx([lp for lp, _, _ in whole["meta_info"]["output_token_logprobs"]], abs=1e-4)
    assert other_seed["output_ids"] != tokens


async def test_abort_request_ends_the_stream_with_an_abort(engine: EngineProcess) -> None:
    async with aiohttp.ClientSession() as s:
        await slow_down(s, engine.url, SLOW)
        try:
            stream = await open_stream(s, engine.url, {**seeded(60), "rid": "to-abort"})
            await stream.next()
            assert await post(s, engine.url, "/abort_request", {"rid": "to-abort"}) == (200, None)
            assert await post(s, engine.url, "/abort_request", {"rid": "nobody"}) == (200, None)
            await stream.rest()
        finally:
            await slow_down(s, engine.url, 0)
        last = stream.last
        assert last["meta_info"]["finish_reason"]["type"] == "abort"
        assert 1 <= len(last["output_ids"]) < 60
        assert (await metrics(s, engine.url))["sglang:num_used_tokens"] == 0


async def test_a_client_that_disconnects_aborts_its_request_and_frees_kv(engine: EngineProcess) -> None:
    async with aiohttp.ClientSession() as s:
        before = (await metrics(s, engine.url))["sglang:generation_tokens_total"]
        await slow_down(s, engine.url, SLOW)
        try:
            stream = await open_stream(s, engine.url, seeded(60))
            await stream.next()
            assert (await metrics(s, engine.url))["sglang:num_used_tokens"] > 0
            stream.response.close()  # drop the connection

            async def freed() -> bool:
                m = await metrics(s, engine.url)
                return m["sglang:num_running_reqs"] == 0 and m["sglang:num_used_tokens"] == 0 and m["sglang:token_usage"] == 0

            await until(freed)
        finally:
            await slow_down(s, engine.url, 0)
        assert (await metrics(s, engine.url))["sglang:generation_tokens_total"] - before < 60  # aborted, not finished
        assert len((await generate(s, engine.url, seeded(5)))["output_ids"]) == 5  # still serving


# ---- pause and continue ------------------------------------------------------------------------


async def test_pause_in_place_holds_everything_until_continue(engine: EngineProcess) -> None:
    async with aiohttp.ClientSession() as s:
        expected = (await generate(s, engine.url, seeded(30)))["output_ids"]
        await slow_down(s, engine.url, SLOW)
        try:
            stream = await open_stream(s, engine.url, seeded(30))
            await stream.next()
            assert await post(s, engine.url, "/pause_generation", {"mode": "in_place"}) == (
                200,
                {"message": "Generation paused successfully.", "status": "ok"},
            )
            paused = await metrics(s, engine.url)
            async with s.get(engine.url + "/health_generate") as response:
                assert response.status == 503
            held = asyncio.ensure_future(generate(s, engine.url, seeded(4)))
            moving = ("sglang:generation_tokens_total", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:num_used_tokens")
            now = await metrics(s, engine.url)
            assert [now[k] for k in moving] == [paused[k] for k in moving]  # no token, no admission while paused
            assert paused["sglang:num_running_reqs"] == 1 and paused["sglang:num_used_tokens"] > 0
            assert not held.done()
        finally:
            await slow_down(s, engine.url, 0)
            assert await post(s, engine.url, "/continue_generation", {}) == (200, {"message": "Generation continued successfully.", "status": "ok"})
        await stream.rest()
        assert stream.last["output_ids"] == expected
        assert len((await held)["output_ids"]) == 4


async def test_pause_retract_frees_kv_and_recomputes_it_on_continue(engine: EngineProcess) -> None:
    async with aiohttp.ClientSession() as s:
        expected = (await generate(s, engine.url, seeded(30, seed=5)))["output_ids"]
        await slow_down(s, engine.url, SLOW)
        try:
            stream = await open_stream(s, engine.url, seeded(30, seed=5))
            await stream.next()
            assert (await post(s, engine.url, "/pause_generation", {"mode": "retract"}))[0] == 200
            m = await metrics(s, engine.url)
            assert (m["sglang:num_running_reqs"], m["sglang:num_queue_reqs"], m["sglang:num_used_tokens"]) == (0, 1, 0)
        finally:
            await slow_down(s, engine.url, 0)
            assert (await post(s, engine.url, "/continue_generation", {}))[0] == 200
        await stream.rest()
    assert stream.last["output_ids"] == expected  # the seeded draws survive the recomputation
    assert stream.last["meta_info"]["num_retractions"] == 1


async def test_pause_abort_ends_every_request(engine: EngineProcess) -> None:
    async with aiohttp.ClientSession() as s:
        await slow_down(s, engine.url, SLOW)
        try:
            streams = [await open_stream(s, engine.url, seeded(50, seed=i)) for i in range(2)]
            for stream in streams:
                await stream.next()
            assert (await post(s, engine.url, "/pause_generation", {}))[0] == 200  # mode defaults to abort
            for stream in streams:
                await stream.rest()
                assert stream.last["meta_info"]["finish_reason"]["type"] == "abort"
            assert (await metrics(s, engine.url))["sglang:num_used_tokens"] == 0
        finally:
            await slow_down(s, engine.url, 0)
            assert (await post(s, engine.url, "/continue_generation", {}))[0] == 200
        assert len((await generate(s, engine.url, seeded(3)))["output_ids"]) == 3


# ---- metrics, info, bad requests ---------------------------------------------------------------


async def test_metrics_and_server_info(engine: EngineProcess) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(engine.url + "/metrics") as response:
            text = await response.text()
        info = await get_json(s, engine.url, "/get_server_info")
        model_info = await get_json(s, engine.url, "/get_model_info")
        version = await get_json(s, engine.url, "/get_weight_version")
    for name in ("sglang:token_usage", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput", "sglang:num_used_tokens"):
        assert f"# TYPE {name} gauge" in text
        assert re.search(rf'^{name}\{{engine_type="unified",model_name="laminar-tinylm",pp_rank="0",tp_rank="0"\}} [0-9.e+-]+$', text, re.M), name
    assert "# TYPE sglang:generation_tokens_total counter" in text
    assert info["max_total_num_tokens"] == 256 and info["max_running_requests"] == 4
    assert "last_gen_throughput" in info["internal_states"][0]
    assert model_info["is_generation"] is True and model_info["weight_version"] == "1"
    assert version == {"weight_version": "1"}


@pytest.mark.parametrize(
    "body, status, key",
    [
        (b"{not json", 400, "object"),
        (b"[1, 2]", 400, "object"),
        (b"", 400, "object"),
        (json.dumps({"input_ids": "1 2 3"}).encode(), 400, "object"),
        (json.dumps({"input_ids": [1, 2.5]}).encode(), 400, "object"),
        (json.dumps({"input_ids": [1], "sampling_params": {"temperature": "hot"}}).encode(), 400, "object"),
        (json.dumps({"input_ids": [1], "sampling_params": [1]}).encode(), 400, "object"),
        (json.dumps({"input_ids": [1], "stream": "yes"}).encode(), 400, "object"),
        (json.dumps({"input_ids": [1], "rid": 7}).encode(), 400, "object"),
        (json.dumps({"input_ids": [1], "sampling_params": {"top_k": 0}}).encode(), 400, "error"),
        (json.dumps({"input_ids": [1], "sampling_params": {"top_p": 0}}).encode(), 400, "error"),
        (json.dumps({"input_ids": [1], "sampling_params": {"max_new_tokens": -1}}).encode(), 400, "error"),
        (json.dumps({"input_ids": [1], "sampling_params": {"temprature": 1}}).encode(), 400, "error"),
        (json.dumps({"input_ids": [1], "sampling_params": {"repetition_penalty": 1.3}}).encode(), 400, "error"),
        (json.dumps({"input_ids": [1, 99]}).encode(), 400, "error"),
        (json.dumps({"input_ids": []}).encode(), 400, "error"),
        (json.dumps({"input_ids": [[1, 2]]}).encode(), 400, "error"),
        (json.dumps({"text": "reverse 12"}).encode(), 400, "error"),
        (json.dumps({"input_ids": [1] * 64}).encode(), 400, "error"),
    ],
)
async def test_bad_generate_requests_get_400_with_a_message(engine: EngineProcess, body: bytes, status: int, key: str) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.post(engine.url + "/generate", data=body, headers={"Content-Type": "application/json"}) as response:
            assert response.status == status
            answer = await response.json()
    message = answer["message"] if key == "object" else answer["error"]["message"]
    assert isinstance(message, str) and message
    if key == "object":
        assert answer == {"object": "error", "message": message, "type": "Bad Request", "param": None, "code": 400}


async def test_refused_streamed_requests_and_other_bad_calls(engine: EngineProcess) -> None:
    async with aiohttp.ClientSession() as s:
        # A refused value in a streamed request: 200, one error event, [DONE] (as upstream).
        async with s.post(engine.url + "/generate", json={"input_ids": [1], "stream": True, "sampling_params": {"top_k": 0}}) as response:
            assert response.status == 200
            raw = await response.read()
        assert raw.startswith(b'data: {"error":{"message":"top_k must be') and raw.endswith(b"\n\ndata: [DONE]\n\n")
        # A rid still in flight is refused.
        await slow_down(s, engine.url, SLOW)
        try:
            stream = await open_stream(s, engine.url, {**seeded(40), "rid": "dup"})
            await stream.next()
            status, answer = await post(s, engine.url, "/generate", {**seeded(3), "rid": "dup"})
            assert status == 400 and "Duplicate request ID" in answer["error"]["message"]
            await post(s, engine.url, "/abort_request", {"rid": "dup"})
            await stream.rest()
        finally:
            await slow_down(s, engine.url, 0)
        assert (await post(s, engine.url, "/pause_generation", {"mode": "sideways"}))[0] == 400
        assert (await post(s, engine.url, "/abort_request", {"rid": 5}))[0] == 400
        assert (await post(s, engine.url, "/update_weights_from_disk", {}))[0] == 400
        assert (await post(s, engine.url, "/update_weights_from_disk", {"model_path": "/x", "weight_version": 3}))[0] == 400
        assert (await post(s, engine.url, "/slow_down", {"forward_sleep_time": "slow"}))[0] == 400
        assert (await post(s, engine.url, "/update_weight_version", {"new_version": "9"}))[0] == 404
        async with s.get(engine.url + "/generate") as response:
            assert response.status == 405
        tokenized = await post(s, engine.url, "/tokenize", {"prompt": "reverse 31415 <sep>"})
        assert tokenized == (200, {"tokens": PROMPT, "count": len(PROMPT), "max_model_len": 64})
        assert (await post(s, engine.url, "/tokenize", {"prompt": "reverse x"}))[0] == 400
        # Still serving, still on version 1, not paused.
        assert len((await generate(s, engine.url, seeded(3)))["output_ids"]) == 3
        assert await get_json(s, engine.url, "/get_weight_version") == {"weight_version": "1"}
        async with s.get(engine.url + "/health_generate") as response:
            assert response.status == 200


# ---- KV capacity, shutdown ------------------------------------------------------------------------


async def test_requests_beyond_the_kv_capacity_wait_for_room(models: SimpleNamespace) -> None:
    process = EngineProcess(["--model-path", str(models.v1), "--kv-capacity", "40", "--max-running", "4"]).start()
    try:
        async with aiohttp.ClientSession() as s:
            url = process.url
            status, answer = await post(s, url, "/generate", seeded(33))  # 8 + 33 > 40: can never run
            assert status == 400 and "capacity of 40" in answer["error"]["message"]
            assert (await get_json(s, url, "/get_server_info"))["max_total_num_tokens"] == 40
            await slow_down(s, url, SLOW)
            try:
                first = await open_stream(s, url, seeded(30, seed=1))  # reserves 38 of 40
                await first.next()
                second = await open_stream(s, url, seeded(30, seed=2))

                async def second_waits() -> bool:
                    return (await metrics(s, url))["sglang:num_queue_reqs"] == 1

                await until(second_waits)
                m = await metrics(s, url)
                assert m["sglang:num_running_reqs"] == 1 and 0 < m["sglang:num_used_tokens"] <= 38
                assert 0 < m["sglang:token_usage"] <= 38 / 40
            finally:
                await slow_down(s, url, 0)
            await first.rest()
            await second.rest()
            assert [len(x.last["output_ids"]) for x in (first, second)] == [30, 30]
            # SIGTERM with a request in flight: it ends with an abort chunk and [DONE], the engine exits 0.
            await slow_down(s, url, SLOW)
            third = await open_stream(s, url, seeded(30, seed=3))
            await third.next()
            stopping = asyncio.get_running_loop().run_in_executor(None, process.stop)
            await third.rest()
            assert third.last["meta_info"]["finish_reason"]["type"] == "abort"
            assert await stopping == 0, "\n".join(process.logs)
    finally:
        process.kill()


# ---- weights -----------------------------------------------------------------------------------------


async def test_engine_without_weights_refuses_generate_until_an_update(models: SimpleNamespace) -> None:
    process = EngineProcess([]).start()
    try:
        async with aiohttp.ClientSession() as s:
            url = process.url
            async with s.get(url + "/health") as response:
                assert response.status == 200
            async with s.get(url + "/health_generate") as response:
                assert response.status == 503
            status, answer = await post(s, url, "/generate", greedy(3))
            assert status == 503 and "update_weights_from_disk" in answer["error"]["message"]
            assert await get_json(s, url, "/get_weight_version") == {"weight_version": None}
            # No config.json and no --config: refused.
            status, answer = await post(s, url, "/update_weights_from_disk", {"model_path": str(models.no_config), "weight_version": "0"})
            assert status == 400 and answer["success"] is False and CONFIG_FILE in answer["message"]
            assert await post(s, url, "/update_weights_from_disk", {"model_path": str(models.v1), "weight_version": "1"}) == (
                200,
                {"success": True, "message": "Succeeded to update model weights. Weight version updated to 1.", "num_paused_requests": 0},
            )
            assert (await generate(s, url, greedy(5)))["meta_info"]["weight_version"] == "1"
        assert process.stop() == 0
    finally:
        process.kill()


async def test_weight_updates_good_and_refused(engine: EngineProcess, models: SimpleNamespace) -> None:
    async with aiohttp.ClientSession() as s:
        url = engine.url
        on_v1 = (await generate(s, url, greedy(10)))["output_ids"]
        refused = [
            (models.missing, "layers.1.attn.qkv.weight"),
            (models.shape, "lm_head.weight"),
            (models.other, "describes another model"),
            (models.nowhere, "not a directory"),
        ]
        for directory, words in refused:
            status, answer = await post(s, url, "/update_weights_from_disk", {"model_path": str(directory), "weight_version": "bad"})
            assert status == 400 and answer["success"] is False and words in answer["message"], answer
            assert await get_json(s, url, "/get_weight_version") == {"weight_version": "1"}
            assert (await generate(s, url, greedy(10)))["output_ids"] == on_v1  # the previous weights still serve
        status, answer = await post(s, url, "/update_weights_from_disk", {"model_path": str(models.v1), "load_format": "gguf"})
        assert status == 400 and "load_format" in answer["message"]

        status, answer = await post(s, url, "/update_weights_from_disk", {"model_path": str(models.v2), "weight_version": "2"})
        assert status == 200 and answer["success"] is True
        on_v2 = await generate(s, url, greedy(10))
        assert on_v2["output_ids"] != on_v1 and on_v2["meta_info"]["weight_version"] == "2"
        assert (await get_json(s, url, "/get_model_info"))["model_path"] == str(models.v2)

        # Not paused: the update waits for the requests in flight, which finish on their version,
        # and holds new ones, which start on the new version.
        await slow_down(s, url, SLOW)
        try:
            running = await open_stream(s, url, seeded(40))
            await running.next()
            update = asyncio.ensure_future(post(s, url, "/update_weights_from_disk", {"model_path": str(models.v1), "weight_version": "3"}))

            async def update_waits() -> bool:  # the update has closed the gate: a new request is held
                return (await get_json(s, url, "/get_server_info"))["internal_states"][0]["weight_update_draining"] is True

            await until(update_waits)
            later = asyncio.ensure_future(generate(s, url, seeded(5)))
        finally:
            await slow_down(s, url, 0)
        await running.rest()
        assert {c["meta_info"]["weight_version"] for c in running.chunks} == {"2"}
        assert (await update)[1]["success"] is True
        assert (await later)["meta_info"]["weight_version"] == "3"

        # Paused in place: the update is applied at once, the held request continues on it (mixed).
        await slow_down(s, url, SLOW)
        try:
            mixed = await open_stream(s, url, seeded(25))
            await mixed.next()
            assert (await post(s, url, "/pause_generation", {"mode": "in_place"}))[0] == 200
            status, answer = await post(s, url, "/update_weights_from_disk", {"model_path": str(models.v2), "weight_version": "4"})
            assert status == 200 and answer["success"] is True
        finally:
            await slow_down(s, url, 0)
            assert (await post(s, url, "/continue_generation", {}))[0] == 200
        await mixed.rest()
        versions = [c["meta_info"]["weight_version"] for c in mixed.chunks]
        assert versions[0] == "3" and versions[-1] == "4"
        # Back to the module's weights for the other tests.
        assert (await post(s, url, "/update_weights_from_disk", {"model_path": str(models.v1), "weight_version": "1"}))[0] == 200


# ---- priority scheduling -------------------------------------------------------------------------------


async def test_priority_scheduling_admits_larger_priorities_first(models: SimpleNamespace) -> None:
    """One request at a time (--max-running 1): while a first one runs, four wait with priorities
    1, 5, 3 and none; they are then served 5, 3, 1, none (FCFS among equals), the order in which
    each one's first token arrives, as the rollout agent's progressive priority relies on."""
    process = EngineProcess(["--model-path", str(models.v1), "--max-running", "1", "--enable-priority-scheduling"]).start()
    try:
        async with aiohttp.ClientSession() as s:
            url = process.url
            await slow_down(s, url, SLOW)
            try:
                blocker = await open_stream(s, url, seeded(20, seed=1))
                await blocker.next()
                priorities: list[Optional[int]] = [1, 5, 3, None]
                waiting = []
                for i, priority in enumerate(priorities):
                    extra = {} if priority is None else {"priority": priority}
                    waiting.append(await open_stream(s, url, seeded(4, seed=10 + i, **extra)))

                async def all_wait() -> bool:
                    return (await metrics(s, url))["sglang:num_queue_reqs"] == len(priorities)

                await until(all_wait)
            finally:
                await slow_down(s, url, 0)
            served: list[Optional[int]] = []

            async def first_token(stream: Stream, priority: Optional[int]) -> None:
                await stream.next()
                served.append(priority)
                await stream.rest()

            await asyncio.gather(blocker.rest(), *(first_token(w, p) for w, p in zip(waiting, priorities)))
            assert served == [5, 3, 1, None]
            status, answer = await post(s, url, "/generate", {**seeded(2), "priority": "high"})
            assert status == 400 and "priority must be an integer" in answer["message"]
    finally:
        process.kill()
