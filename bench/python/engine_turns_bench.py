"""The reference engine alone on the actions bench's multi-turn pattern; prints ONE JSON line.

    OMP_NUM_THREADS=1 .venv/bin/python bench/python/engine_turns_bench.py [--rounds 3]

What the `multi-turn` section of `npm run bench -- actions` (bench/actions-multi-turn.ts) asks of
the engine, without HTTP, the agent, JetStream or the tool: its scheduler runs in this process on
the lookup task's TinyLM (22 ids, d_model 64, 2 layers), 32 trajectories of the same prompt, 8 at
once, each exactly 96 generated tokens with seeded sampling. Single-turn: one request each.
Multi-turn: a turn ends at id 17 (`</tool_call>`), and the next request is the context so far plus
a 6-token observation, sent at once (no tool wait). A third side runs multi-turn with the prefix
cache off. Each side `--rounds` times, in turn.

Figures: per side, the engine's CPU seconds per round (this process: the event loop and the model's
thread; median) as generated tokens per CPU second, the model forwards a round took, and the ratios
of multi-turn to single-turn; `tokens_digest` per side, a hash of every generated token (multi-turn
with and without the cache must agree, and a change to the engine that keeps its outputs keeps
it). To compare two trees of the engine, run it with `PYTHONPATH=<tree>/python/src`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import time

import torch
from laminar.testing.engine.protocol import GenerateRequest
from laminar.testing.engine.sampling import SamplingParams
from laminar.testing.engine.scheduler import Scheduler
from laminar.testing.engine.weights import random_model
from laminar.testing.model import TinyLMConfig

CONFIG = TinyLMConfig(vocab_size=22, d_model=64, n_layers=2, n_heads=2, max_seq_len=512)
PROMPT = [1, 20, 7, 5, 8, 3]
CLOSE = 17
TRAJECTORIES, TOKENS, CONCURRENCY = 32, 96, 8


async def one_round(prefix_cache: bool, multi_turn: bool) -> tuple[float, int, dict[int, list[int]]]:
    """CPU seconds, model forwards, and each trajectory's generated tokens."""
    scheduler = Scheduler(65_536, CONCURRENCY, 0, 1, CONFIG, prefix_cache=prefix_cache)
    scheduler.install(random_model(CONFIG, 1), CONFIG, None, "0")
    forwards = 0
    # Count the model's forwards (the step kinds differ between engine versions: count them all).
    for name in ("_extend", "_prefill", "_decode"):
        step = getattr(scheduler, name, None)
        if step is not None:

            def counted(*args: object, _step: object = step) -> object:
                nonlocal forwards
                forwards += 1
                return _step(*args)  # type: ignore[operator]

            setattr(scheduler, name, counted)
    loop = asyncio.ensure_future(scheduler.run())
    slots = asyncio.Semaphore(CONCURRENCY)
    outputs: dict[int, list[int]] = {}

    async def generate(input_ids: list[int], budget: int, seed: int) -> list[int]:
        stop = frozenset([CLOSE]) if multi_turn else frozenset()
        params = SamplingParams(max_new_tokens=budget, temperature=1.0, ignore_eos=True, stop_token_ids=stop, sampling_seed=seed)
        seq = scheduler.create(GenerateRequest(None, input_ids, params, True, False))
        await scheduler.enter(seq)
        while not seq.finished:
            seq.changed.clear()
            await seq.changed.wait()
        return seq.output_ids

    async def trajectory(i: int) -> None:
        async with slots:
            context, left, generated = list(PROMPT), TOKENS, []
            while left > 0:
                out = await generate(context, left, 1000 + i)
                left -= len(out)
                generated += out
                context += out
                if left > 0:
                    context += [2, 9, 10 + len(out) % 10, 4, 11, 3]
            outputs[i] = generated

    cpu = time.process_time()
    await asyncio.gather(*(trajectory(i) for i in range(TRAJECTORIES)))
    cpu = time.process_time() - cpu
    await scheduler.stop()
    loop.cancel()
    return cpu, forwards, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sides = {"single_turn": (True, False), "multi_turn": (True, True), "multi_turn_no_prefix_cache": (False, True)}
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    result: dict[str, object] = {"bench": "engine_turns", "trajectories": TRAJECTORIES, "tokens_each": TOKENS, "rounds": args.rounds}
    for _ in range(args.rounds):
        for side, (cache, multi) in sides.items():
            seconds, forwards, outputs = asyncio.run(one_round(cache, multi))
            assert all(len(o) == TOKENS for o in outputs.values()), "every trajectory generates exactly TOKENS tokens"
            cpu[side].append(seconds)
            result[f"{side}_forwards"] = forwards
            result[f"{side}_tokens_digest"] = hashlib.sha1(json.dumps(sorted(outputs.items())).encode()).hexdigest()[:12]
    rates = {side: TRAJECTORIES * TOKENS / statistics.median(seconds) for side, seconds in cpu.items()}
    for side, rate in rates.items():
        result[f"{side}_tokens_per_cpu_s"] = round(rate, 1)
    result["multi_turn_over_single"] = round(rates["multi_turn"] / rates["single_turn"], 3)
    result["multi_turn_no_prefix_cache_over_single"] = round(rates["multi_turn_no_prefix_cache"] / rates["single_turn"], 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
