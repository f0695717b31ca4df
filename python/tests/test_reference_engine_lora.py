"""LoRA adapters in the reference engine, over HTTP on a real engine process: SGLang's
/load_lora_adapter and /unload_lora_adapter, `lora_path` on /generate, adapters and the base
batched together, deferred unloading, and refused adapters (laminar.testing.lora, engine/adapters.py).

The reference for an adapter's output is the base model with the adapter merged into its weights
(W + lora_alpha / r * B @ A), run in this process through TinyLM's training forward: greedy, token
for token. Nothing is slept for: a request is kept running with /slow_down and conditions are
polled.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import aiohttp
import pytest
import torch
from engine_process import EngineProcess
from safetensors.torch import load_file, save_file
from test_reference_engine import generate, get_json, metrics, open_stream, post, slow_down, until

from laminar.testing import TinyLM, TinyLMConfig, save_model
from laminar.testing import digits
from laminar.testing.lora import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, LoraAdapter, LoraConfig, merged_state_dict, read_lora_adapter

SMALL = TinyLMConfig(vocab_size=16, d_model=32, n_layers=2, n_heads=2, max_seq_len=64)
PROMPTS = [digits.make_prompt("reverse", "31415").input_ids, digits.make_prompt("repeat", "2718").input_ids]
NEW = 20
SLOW = 0.05


def seeded_base(seed: int = 1, config: TinyLMConfig = SMALL) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM(config).eval()


def trained_like(base: TinyLM, seed: int, r: int = 4, alpha: float = 8.0, targets: Any = ("qkv", "out", "fc_in", "fc_out")) -> LoraAdapter:
    """An adapter with B no longer zero (as after training), large enough to change the greedy output."""
    torch.manual_seed(seed)
    adapter = LoraAdapter(base, LoraConfig(r=r, lora_alpha=alpha, target_modules=targets, base_model_name_or_path="digits/tiny"))
    with torch.no_grad():
        for b in adapter.lora_b:
            b.normal_(0.0, 0.3)
    return adapter


def greedy_reference(model: TinyLM, prompt: list[int], n: int) -> list[int]:
    """Greedy continuation by the training forward (no KV cache): an independent path."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt) :]


def merged(base: TinyLM, adapter_dir: Path) -> TinyLM:
    model = TinyLM(base.config)
    model.load_state_dict(merged_state_dict(base, read_lora_adapter(adapter_dir, base)))
    return model.eval()


def greedy(prompt: list[int], lora: Any = None, n: int = NEW) -> dict[str, Any]:
    body: dict[str, Any] = {"input_ids": prompt, "sampling_params": {"max_new_tokens": n, "temperature": 0, "ignore_eos": True}}
    if lora is not None:
        body["lora_path"] = lora
    return body


@pytest.fixture(scope="module")
def lora(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """The base model directory, two good adapters and refused ones, and the reference outputs."""
    root = tmp_path_factory.mktemp("lora")
    base = seeded_base()
    save_model(base, root / "base")
    good_a = trained_like(base, 11).save(root / "a")
    good_b = trained_like(base, 12, r=2, alpha=4.0, targets=["qkv", "fc_out", "lm_head"]).save(root / "b")

    def variant(name: str, config: Any = None, tensors: Any = None) -> Path:
        """Adapter a's directory with its config or tensors replaced."""
        out = root / name
        out.mkdir()
        raw = json.loads((good_a / ADAPTER_CONFIG_FILE).read_text())
        text = config(raw) if callable(config) else json.dumps(raw)
        (out / ADAPTER_CONFIG_FILE).write_text(text)
        state = load_file(str(good_a / ADAPTER_WEIGHTS_FILE))
        save_file(tensors(state) if tensors else state, str(out / ADAPTER_WEIGHTS_FILE))
        return out

    other_base = trained_like(seeded_base(2, TinyLMConfig(vocab_size=16, d_model=64, n_layers=2, n_heads=2, max_seq_len=64)), 13).save(root / "other")
    deeper = trained_like(seeded_base(3, TinyLMConfig(vocab_size=16, d_model=32, n_layers=3, n_heads=2, max_seq_len=64)), 14).save(root / "deeper")
    a_key = "base_model.model.layers.0.attn.qkv.lora_A.weight"
    bad = {
        "other_base": (other_base, "does not fit the served model: layers.0.attn.out has lora_A [4, 64]"),
        "deeper": (deeper, "another base model: layers.2.attn.out is not a linear layer of the served model"),
        "unparsable": (variant("unparsable", config=lambda raw: "{not json"), "cannot parse"),
        "not_lora": (variant("not-lora", config=lambda raw: json.dumps({**raw, "peft_type": "PREFIX_TUNING"})), "peft_type is 'PREFIX_TUNING'"),
        "rslora": (variant("rslora", config=lambda raw: json.dumps({**raw, "use_rslora": True})), "use_rslora = true is not supported"),
        "rank": (variant("rank", config=lambda raw: json.dumps({**raw, "r": 8})), "expected [8, 32] and [32, 8]"),
        "untargeted": (variant("untargeted", config=lambda raw: json.dumps({**raw, "target_modules": ["fc_in"]})), "is not in target_modules"),
        "half": (variant("half", tensors=lambda s: {k: v for k, v in s.items() if k != a_key}), f"{a_key} is missing"),
        "nowhere": (root / "nowhere", "is not a directory"),
    }
    return SimpleNamespace(
        base_dir=root / "base",
        a=good_a,
        b=good_b,
        bad=bad,
        base_tokens=[greedy_reference(base, p, NEW) for p in PROMPTS],
        a_tokens=[greedy_reference(merged(base, good_a), p, NEW) for p in PROMPTS],
        b_tokens=[greedy_reference(merged(base, good_b), p, NEW) for p in PROMPTS],
    )


@pytest.fixture(scope="module")
def engine(lora: SimpleNamespace) -> Iterator[EngineProcess]:
    process = EngineProcess(
        ["--model-path", str(lora.base_dir), "--weight-version", "1", "--kv-capacity", "512", "--max-running", "8", "--max-loras", "2"]
    ).start()
    yield process
    assert process.stop() == 0, "\n".join(process.logs)


async def load(s: aiohttp.ClientSession, url: str, name: str, path: Path) -> tuple[int, Any]:
    return await post(s, url, "/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})


async def unload(s: aiohttp.ClientSession, url: str, name: str) -> tuple[int, Any]:
    return await post(s, url, "/unload_lora_adapter", {"lora_name": name})


def test_the_references_differ(lora: SimpleNamespace) -> None:
    """Otherwise the tests below could pass with the adapters ignored."""
    for i in range(len(PROMPTS)):
        assert lora.a_tokens[i] != lora.base_tokens[i] and lora.b_tokens[i] != lora.base_tokens[i] and lora.a_tokens[i] != lora.b_tokens[i]


async def test_adapters_and_the_base_batched_together_each_equal_their_merged_model(engine: EngineProcess, lora: SimpleNamespace) -> None:
    async with aiohttp.ClientSession() as s:
        url = engine.url
        before = [(await generate(s, url, greedy(p)))["output_ids"] for p in PROMPTS]
        assert before == lora.base_tokens
        assert await load(s, url, "a", lora.a) == (200, {"success": True, "error_message": "", "loaded_adapters": {"a": str(lora.a)}})
        status, answer = await load(s, url, "b", lora.b)
        assert status == 200 and answer["loaded_adapters"] == {"a": str(lora.a), "b": str(lora.b)}
        # One at a time.
        for i, p in enumerate(PROMPTS):
            assert (await generate(s, url, greedy(p, "a")))["output_ids"] == lora.a_tokens[i]
            assert (await generate(s, url, greedy(p, "b")))["output_ids"] == lora.b_tokens[i]
            assert (await generate(s, url, greedy(p)))["output_ids"] == lora.base_tokens[i]
        # All six in flight at once: the decode steps mix a, b and the base row by row.
        await slow_down(s, url, SLOW)
        try:
            cases = [
                (p, name, expected[i])
                for i, p in enumerate(PROMPTS)
                for name, expected in (("a", lora.a_tokens), ("b", lora.b_tokens), (None, lora.base_tokens))
            ]
            streams = [await open_stream(s, url, greedy(p, name)) for p, name, _ in cases]

            async def all_running() -> bool:
                return (await metrics(s, url))["sglang:num_running_reqs"] == len(cases)

            await until(all_running)
        finally:
            await slow_down(s, url, 0)
        for stream, (_, name, expected) in zip(streams, cases):
            await stream.rest()
            assert stream.last["output_ids"] == expected, name
        assert (await unload(s, url, "b"))[0] == 200
        assert (await unload(s, url, "a")) == (200, {"success": True, "error_message": "", "loaded_adapters": {}})
        after = [(await generate(s, url, greedy(p)))["output_ids"] for p in PROMPTS]
        assert after == lora.base_tokens


async def test_unload_waits_for_the_requests_using_the_adapter(engine: EngineProcess, lora: SimpleNamespace) -> None:
    """As SGLang: the name is refused to new requests at once, the unload answers once the requests
    already running with it have finished (on the adapter, to their end); base requests go on."""
    async with aiohttp.ClientSession() as s:
        url = engine.url
        assert (await load(s, url, "a", lora.a))[0] == 200
        await slow_down(s, url, SLOW)
        try:
            running = await open_stream(s, url, greedy(PROMPTS[0], "a"))
            await running.next()
            unloading = asyncio.ensure_future(unload(s, url, "a"))

            async def refused_to_new_requests() -> bool:
                status, _ = await post(s, url, "/generate", greedy(PROMPTS[0], "a", n=1))
                return status == 400

            await until(refused_to_new_requests)
            status, answer = await post(s, url, "/generate", greedy(PROMPTS[0], "a", n=1))
            assert "The following requested LoRA adapters are not loaded: a" in answer["error"]["message"]
            assert not unloading.done() and running.last["meta_info"]["finish_reason"] is None
            base = await generate(s, url, greedy(PROMPTS[1], n=3))  # the base is served meanwhile
            assert base["output_ids"] == lora.base_tokens[1][:3]
        finally:
            await slow_down(s, url, 0)
        await running.rest()
        assert running.last["output_ids"] == lora.a_tokens[0]
        assert running.last["meta_info"]["finish_reason"] == {"type": "length", "length": NEW}
        assert await unloading == (200, {"success": True, "error_message": "", "loaded_adapters": {}})
        # Loaded again under the same name, it serves again.
        assert (await load(s, url, "a", lora.a))[0] == 200
        assert (await generate(s, url, greedy(PROMPTS[0], "a")))["output_ids"] == lora.a_tokens[0]
        assert (await unload(s, url, "a"))[0] == 200


async def test_bad_adapters_are_refused_with_the_reason(engine: EngineProcess, lora: SimpleNamespace) -> None:
    async with aiohttp.ClientSession() as s:
        url = engine.url
        for name, (path, words) in lora.bad.items():
            status, answer = await load(s, url, name, path)
            assert status == 400 and answer["success"] is False and answer["loaded_adapters"] is None, (name, answer)
            assert words in answer["error_message"], (name, answer["error_message"])
            assert answer["error_message"].startswith(f"Failed to load LoRA adapter {name} from {path}: ERR_")
        # Nothing of them was registered: the base serves, and no adapter is there.
        assert (await generate(s, url, greedy(PROMPTS[0])))["output_ids"] == lora.base_tokens[0]
        status, answer = await post(s, url, "/generate", greedy(PROMPTS[0], "other_base"))
        assert status == 400 and "not loaded: other_base" in answer["error"]["message"]
        # Limits and names: --max-loras 2, a name loaded twice, an unload of a name never loaded.
        assert (await load(s, url, "a", lora.a))[0] == 200
        status, answer = await load(s, url, "a", lora.b)
        assert status == 400 and "LoRA with name a already exists" in answer["error_message"]
        assert (await load(s, url, "b", lora.b))[0] == 200
        status, answer = await load(s, url, "c", lora.a)
        assert status == 400 and "Maximum number of loaded LoRA adapters is 2" in answer["error_message"]
        status, answer = await unload(s, url, "c")
        assert status == 400 and answer["success"] is False and "LoRA with name c does not exist" in answer["error_message"]
        assert (await unload(s, url, "a"))[0] == 200 and (await unload(s, url, "b"))[0] == 200
        # Malformed calls: FastAPI's validation body, as for the other routes.
        for path, body in [("/load_lora_adapter", {"lora_name": "x"}), ("/load_lora_adapter", {"lora_path": "/x"}), ("/unload_lora_adapter", {})]:
            status, answer = await post(s, url, path, body)
            assert status == 400 and answer["object"] == "error", (path, answer)
        status, answer = await post(s, url, "/generate", {**greedy(PROMPTS[0]), "lora_path": ["a"]})
        assert status == 400 and "list of lora_path" in answer["error"]["message"]
        status, answer = await post(s, url, "/generate", {**greedy(PROMPTS[0]), "lora_path": 3})
        assert status == 400 and answer["object"] == "error"
        assert (await get_json(s, url, "/get_server_info"))["max_loaded_loras"] == 2


async def test_an_engine_without_weights_refuses_adapters(lora: SimpleNamespace) -> None:
    process = EngineProcess([]).start()
    try:
        async with aiohttp.ClientSession() as s:
            status, answer = await load(s, process.url, "a", lora.a)
            assert status == 400 and "no base weights yet" in answer["error_message"]
    finally:
        assert process.stop() == 0
