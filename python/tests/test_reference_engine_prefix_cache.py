"""The reference engine's prefix cache, on real engine processes over HTTP: multi-turn conversations
and siblings of one prompt reuse cached KV and produce the very tokens of an engine without the
cache (--disable-radix-cache); new weights flush it (KV of old weights is never reused, also not
that of a request paused in place across the update); cached prefixes are keyed by LoRA adapter
load; cached tokens are evicted, least recently used first, before a request waits for room; the
metrics count cached tokens apart from used ones.

Prompts start with distinct first tokens wherever a test needs "nothing shared" (the cache matches
the longest common prefix, so one shared first token would already be a hit).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import aiohttp
import pytest
import torch
from engine_process import EngineProcess
from test_reference_engine import SLOW, generate, get_json, metrics, open_stream, post, seeded_model, slow_down, until

from laminar.testing import save_model
from laminar.testing.lora import LoraAdapter, LoraConfig


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("prefix-models")
    return SimpleNamespace(v1=save_model(seeded_model(1), root / "v1"), v2=save_model(seeded_model(2), root / "v2"))


def start(model: Path, *extra: str) -> EngineProcess:
    return EngineProcess(["--model-path", str(model), "--kv-capacity", "1024", "--max-running", "4", *extra]).start()


@pytest.fixture(scope="module")
def engines(models: SimpleNamespace) -> Iterator[SimpleNamespace]:
    """Two engines on the same weights: with the prefix cache (the default) and without."""
    cached, plain = start(models.v1), start(models.v1, "--disable-radix-cache")
    yield SimpleNamespace(cached=cached, plain=plain)
    for process in (cached, plain):
        assert process.stop() == 0, "\n".join(process.logs)


def request(input_ids: list[int], max_new_tokens: int, seed: int | None = None) -> dict[str, Any]:
    """Greedy (seed None) or seeded sampling; fixed length, so every turn has the same shape."""
    params: dict[str, Any] = {"max_new_tokens": max_new_tokens, "ignore_eos": True}
    params.update({"temperature": 0} if seed is None else {"temperature": 1.0, "sampling_seed": seed})
    return {"input_ids": input_ids, "sampling_params": params}


async def conversation(s: aiohttp.ClientSession, url: str, first: int, seed: int | None, turns: int = 4) -> tuple[list[list[int]], list[int]]:
    """A multi-turn exchange: each turn's input is the previous input, its output and an
    "observation" of three tokens. Returns each turn's output ids and cached token count."""
    context = [first, 5, 6, 7, 8, 3]
    outputs, cached = [], []
    for turn in range(turns):
        answer = await generate(s, url, request(context, 6, seed))
        outputs.append(answer["output_ids"])
        cached.append(answer["meta_info"]["cached_tokens"])
        context = context + answer["output_ids"] + [9, (turn + first) % 16, 4]
    return outputs, cached


async def test_conversations_reuse_the_cache_and_match_an_engine_without_it(engines: SimpleNamespace) -> None:
    async with aiohttp.ClientSession() as s:
        # Three conversations at once on each engine (batched decodes, admissions between steps).
        cases = [(first, seed) for first, seed in ((10, None), (11, 7), (12, None))]
        with_cache = await asyncio.gather(*(conversation(s, engines.cached.url, first, seed) for first, seed in cases))
        without = await asyncio.gather(*(conversation(s, engines.plain.url, first, seed) for first, seed in cases))
        for (outputs, cached), (plain_outputs, plain_cached) in zip(with_cache, without):
            assert outputs == plain_outputs  # token for token, greedy and seeded sampling
            assert plain_cached == [0, 0, 0, 0]
            # Turn k + 1 reuses turn k's whole context but the last generated token (never decoded).
            assert cached[0] == 0
            assert cached[1:] == [6 + 6 - 1, 6 + 6 + 3 + 6 - 1, 6 + 2 * (6 + 3) + 6 - 1]
        m, plain_m = await metrics(s, engines.cached.url), await metrics(s, engines.plain.url)
        assert m["sglang:cached_tokens_total"] == 3 * (11 + 20 + 29)
        assert 0 < m["sglang:cache_hit_rate"] < 1
        assert plain_m["sglang:cached_tokens_total"] == 0 and plain_m["sglang:cache_hit_rate"] == 0
        # Finished sequences' KV is cached, not used: the used figures say no request holds KV.
        info = await get_json(s, engines.cached.url, "/get_server_info")
        assert info["disable_radix_cache"] is False
        assert info["internal_states"][0]["num_used_tokens"] == 0 and m["sglang:num_used_tokens"] == 0 and m["sglang:token_usage"] == 0
        assert info["internal_states"][0]["num_cached_prefix_tokens"] > 0
        plain_info = await get_json(s, engines.plain.url, "/get_server_info")
        assert plain_info["disable_radix_cache"] is True and plain_info["internal_states"][0]["num_cached_prefix_tokens"] == 0


async def test_siblings_of_one_prompt_share_its_prefix(engines: SimpleNamespace) -> None:
    """GRPO's n samples of a prompt: the second and later copy the first's prefix (a partial match)."""
    prompt = [13, 1, 2, 3, 4, 5, 6, 7]
    async with aiohttp.ClientSession() as s:
        for url, expect_cached in ((engines.cached.url, len(prompt) - 1), (engines.plain.url, 0)):
            answers = [await generate(s, url, request(prompt, 8, seed)) for seed in (1, 2, 3)]
            assert [a["meta_info"]["cached_tokens"] for a in answers] == [0, expect_cached, expect_cached]
            if url == engines.cached.url:
                outputs = [a["output_ids"] for a in answers]
            else:
                assert [a["output_ids"] for a in answers] == outputs


async def test_new_weights_flush_the_cache(models: SimpleNamespace) -> None:
    """After an update nothing computed with the old weights is reused: the next turn prefills its
    whole context and answers as an engine started on the new weights."""
    engine, fresh = start(models.v1), start(models.v2, "--disable-radix-cache")
    try:
        async with aiohttp.ClientSession() as s:
            context = [14, 5, 6, 7, 8, 3]
            first = await generate(s, engine.url, request(context, 6))
            following = context + first["output_ids"] + [9, 9, 4]
            assert (await post(s, engine.url, "/update_weights_from_disk", {"model_path": str(models.v2)}))[0] == 200
            assert (await get_json(s, engine.url, "/get_server_info"))["internal_states"][0]["num_cached_prefix_tokens"] == 0
            after = await generate(s, engine.url, request(following, 6))
            assert after["meta_info"]["cached_tokens"] == 0
            assert after["output_ids"] == (await generate(s, fresh.url, request(following, 6)))["output_ids"]
    finally:
        assert engine.stop() == 0 and fresh.stop() == 0


async def test_a_request_paused_in_place_across_an_update_is_not_cached(models: SimpleNamespace) -> None:
    """Its KV spans both versions (in_place keeps the old KV): reusing it would mix weights."""
    engine = start(models.v1)
    try:
        async with aiohttp.ClientSession() as s:
            context = [15, 5, 6, 7, 8, 3]
            await slow_down(s, engine.url, SLOW)
            try:
                stream = await open_stream(s, engine.url, request(context, 20))
                await stream.next()
                assert (await post(s, engine.url, "/pause_generation", {"mode": "in_place"}))[0] == 200
                assert (await post(s, engine.url, "/update_weights_from_disk", {"model_path": str(models.v2)}))[0] == 200
            finally:
                await slow_down(s, engine.url, 0)
                assert (await post(s, engine.url, "/continue_generation", {}))[0] == 200
            await stream.rest()
            following = context + stream.last["output_ids"] + [9, 9, 4]
            assert (await generate(s, engine.url, request(following, 4)))["meta_info"]["cached_tokens"] == 0
    finally:
        assert engine.stop() == 0


async def test_cached_prefixes_are_evicted_least_recently_used_first(models: SimpleNamespace) -> None:
    """Capacity 100 tokens. A and B finish (23 cached tokens each); A's next turn takes A's entry
    and leaves 40; C needs 48 reserved tokens, so 52 may stay cached: B, the least recently used,
    is evicted and A's turn stays. Without eviction C would wait for room forever."""
    engine = EngineProcess(["--model-path", str(models.v1), "--kv-capacity", "100", "--max-running", "4"]).start()
    try:
        async with aiohttp.ClientSession() as s:
            info = lambda: get_json(s, engine.url, "/get_server_info")  # noqa: E731
            a, b = [3, 5, 6, 7, 8, 9, 10, 11], [4, 5, 6, 7, 8, 9, 10, 11]
            out_a = (await generate(s, engine.url, request(a, 16)))["output_ids"]
            out_b = (await generate(s, engine.url, request(b, 16)))["output_ids"]
            assert (await info())["internal_states"][0]["num_cached_prefix_tokens"] == 46
            a2 = a + out_a + [1]
            answer = await generate(s, engine.url, request(a2, 16))
            assert answer["meta_info"]["cached_tokens"] == 23
            assert (await info())["internal_states"][0]["num_cached_prefix_tokens"] == 23 + 40
            assert len((await generate(s, engine.url, request([2, 5, 6, 7, 8, 9, 10, 11], 40)))["output_ids"]) == 40
            # A's turn was kept, B was evicted.
            assert (await generate(s, engine.url, request(a2 + answer["output_ids"] + [1], 4)))["meta_info"]["cached_tokens"] == 40
            assert (await generate(s, engine.url, request(b + out_b + [1], 4)))["meta_info"]["cached_tokens"] == 0
            m = await metrics(s, engine.url)
            assert m["sglang:num_used_tokens"] == 0 and m["sglang:num_running_reqs"] == 0 and m["sglang:num_queue_reqs"] == 0
    finally:
        assert engine.stop() == 0


async def test_the_cache_is_bounded_by_tokens_not_by_sequences(models: SimpleNamespace) -> None:
    """One running request at a time and room for many cached ones: twelve conversations' first
    turns finish one after the other (14 cached tokens each, 168 in all of 1024), and every second
    turn still finds its first. A bound of 4 sequences per running request, as the cache had,
    evicted the first eight before their second turns (SGLang's radix cache counts tokens only)."""
    engine = EngineProcess(["--model-path", str(models.v1), "--kv-capacity", "1024", "--max-running", "1"]).start()
    try:
        async with aiohttp.ClientSession() as s:
            firsts = [[first % 16, 5, 6, 7, 8, 3, first // 16] for first in range(12)]
            contexts = [first + (await generate(s, engine.url, request(first, 8)))["output_ids"] + [9] for first in firsts]
            info = await get_json(s, engine.url, "/get_server_info")
            assert info["internal_states"][0]["num_cached_prefix_tokens"] == 12 * 14
            cached = [(await generate(s, engine.url, request(context, 2)))["meta_info"]["cached_tokens"] for context in contexts]
            assert cached == [14] * 12
    finally:
        assert engine.stop() == 0


async def test_an_aborted_request_frees_its_kv_into_the_cache(engines: SimpleNamespace) -> None:
    """An abort (a repack's, a disconnect's) ends the reservation at once; what it computed stays
    cached, so the request resent as prompt + tokens so far prefills only the rest."""
    async with aiohttp.ClientSession() as s:
        url = engines.cached.url
        await slow_down(s, url, SLOW)
        try:
            stream = await open_stream(s, url, {**request([1, 5, 6, 7, 8, 3], 40, seed=3), "rid": "prefix-abort"})
            await stream.next()
            assert (await post(s, url, "/abort_request", {"rid": "prefix-abort"}))[0] == 200
            await stream.rest()
        finally:
            await slow_down(s, url, 0)
        await until(lambda: _no_used_tokens(s, url))
        so_far = stream.last["output_ids"]
        assert stream.last["meta_info"]["finish_reason"]["type"] == "abort" and so_far
        resent = await generate(s, url, request([1, 5, 6, 7, 8, 3] + so_far, 4, seed=3))
        assert resent["meta_info"]["cached_tokens"] == 6 + len(so_far) - 1


async def _no_used_tokens(s: aiohttp.ClientSession, url: str) -> bool:
    return (await metrics(s, url))["sglang:num_used_tokens"] == 0


async def test_cached_prefixes_are_keyed_by_adapter_load(tmp_path: Path) -> None:
    """KV computed with a LoRA adapter changes with it: the base, another adapter, or the same name
    loaded again never reuse it; the same load does, with the tokens of an engine without cache."""
    base = seeded_model(1)
    save_model(base, tmp_path / "base")
    torch.manual_seed(5)
    adapter = LoraAdapter(base, LoraConfig(r=2, lora_alpha=4.0, target_modules=["qkv", "fc_out"], base_model_name_or_path="digits/tiny"))
    with torch.no_grad():
        for b in adapter.lora_b:
            b.normal_(0.0, 0.3)
    adapter_dir = adapter.save(tmp_path / "a")
    cached_engine, plain = start(tmp_path / "base"), start(tmp_path / "base", "--disable-radix-cache")
    try:
        async with aiohttp.ClientSession() as s:
            for url in (cached_engine.url, plain.url):
                assert (await post(s, url, "/load_lora_adapter", {"lora_name": "a", "lora_path": str(adapter_dir)}))[0] == 200
            context = [3, 5, 6, 7, 8, 9]
            first = await generate(s, cached_engine.url, {**request(context, 6), "lora_path": "a"})
            following = context + first["output_ids"] + [1, 2]
            as_base = await generate(s, cached_engine.url, request(following, 4))
            assert as_base["meta_info"]["cached_tokens"] == 0
            with_adapter = await generate(s, cached_engine.url, {**request(following, 4), "lora_path": "a"})
            assert with_adapter["meta_info"]["cached_tokens"] == len(context) + 6 - 1
            assert with_adapter["output_ids"] == (await generate(s, plain.url, {**request(following, 4), "lora_path": "a"}))["output_ids"]
            # Unloaded and loaded again under the same name: another load, nothing reused.
            assert (await post(s, cached_engine.url, "/unload_lora_adapter", {"lora_name": "a"}))[0] == 200
            assert (await post(s, cached_engine.url, "/load_lora_adapter", {"lora_name": "a", "lora_path": str(adapter_dir)}))[0] == 200
            again = following + with_adapter["output_ids"] + [1]
            assert (await generate(s, cached_engine.url, {**request(again, 2), "lora_path": "a"}))["meta_info"]["cached_tokens"] == 0
    finally:
        assert cached_engine.stop() == 0 and plain.stop() == 0
