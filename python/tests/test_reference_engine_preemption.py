"""The reference engine's priority preemption (SGLang's, with --enable-priority-scheduling): a
waiting request that finds no slot or no room retracts running requests whose priority is lower
by more than the threshold, the lowest first; a retracted request resumes token for token.

In process (no HTTP): the scheduler's loop runs on the test's event loop; the tests decide on the
sequences' own events (a token, the finish), never on elapsed time.
"""

from __future__ import annotations

import asyncio
from typing import Optional

import numpy as np
import pytest
import torch

from laminar.testing import TinyLM, TinyLMConfig
from laminar.testing.engine.options import parse_options
from laminar.testing.engine.protocol import GenerateRequest
from laminar.testing.engine.sampling import SamplingParams, sample
from laminar.testing.engine.scheduler import Scheduler, Sequence

CONFIG = TinyLMConfig(vocab_size=16, d_model=32, n_layers=2, n_heads=2, max_seq_len=64)
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


def model() -> TinyLM:
    torch.manual_seed(7)
    return TinyLM(CONFIG).eval()


def params(seed: int, n: int) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, temperature=1.0, ignore_eos=True, sampling_seed=seed)


def alone(m: TinyLM, input_ids: list[int], p: SamplingParams) -> list[int]:
    """The tokens of one sequence generated alone, the full forward for every token."""
    context, tokens = list(input_ids), []
    with torch.no_grad():
        for _ in range(p.max_new_tokens or 0):
            token, _ = sample(m(torch.tensor([context]))[0, -1].numpy(), p, len(context), np.random.default_rng(0))
            context.append(token)
            tokens.append(token)
    return tokens


class Engine:
    """A scheduler on the test's loop, recording the order in which its requests finish."""

    def __init__(self, max_running: int, kv_capacity: int = 4096, threshold: Optional[int] = 10) -> None:
        self.model = model()
        self.scheduler = Scheduler(
            kv_capacity, max_running, eos_token_id=0, seed=0, fallback_config=None, priority_scheduling=True, preemption_threshold=threshold
        )
        self.scheduler.install(self.model, CONFIG, None, "1")
        self.finished: list[str] = []
        self._watchers: list[asyncio.Future[None]] = []
        self._loop: Optional[asyncio.Future[None]] = None

    async def __aenter__(self) -> "Engine":
        self._loop = asyncio.ensure_future(self.scheduler.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.scheduler.stop()
        assert self._loop is not None
        self._loop.cancel()
        for w in self._watchers:
            w.cancel()

    async def start(self, name: str, priority: int, p: SamplingParams, prompt: list[int] = PROMPT) -> Sequence:
        """Enters a request without yielding to the loop (several started in a row are seen by one admission)."""
        seq = self.scheduler.create(GenerateRequest(name, prompt, p, True, False, priority=priority))
        await self.scheduler.enter(seq)
        self._watchers.append(asyncio.ensure_future(self._record(seq)))
        return seq

    async def _record(self, seq: Sequence) -> None:
        await done(seq)
        self.finished.append(seq.rid)


async def done(seq: Sequence) -> None:
    while not seq.finished:
        seq.changed.clear()
        await seq.changed.wait()


async def tokens(seq: Sequence, n: int) -> None:
    """Until the sequence has generated `n` tokens."""
    while len(seq.output_ids) < n and not seq.finished:
        seq.changed.clear()
        await seq.changed.wait()


async def test_a_request_preempts_only_beyond_the_threshold_and_the_retracted_one_resumes() -> None:
    """One slot. A request 10 above the running one's priority waits (the difference must exceed the
    threshold); one 11 above retracts it and runs; then the waiting one, then the retracted one,
    which continues exactly where it stopped: its tokens are those it generates alone."""
    async with Engine(max_running=1) as e:
        low_params = params(1, 40)
        low = await e.start("low", 5, low_params)
        await tokens(low, 2)
        level = await e.start("level", 15, params(2, 6))
        # Two more tokens of `low`: the second comes from a step begun after an admission that saw `level`.
        await tokens(low, len(low.output_ids) + 2)
        assert level.slot is None and low.num_retractions == 0 and e.scheduler.retracted_total == 0
        high = await e.start("high", 16, params(3, 6))
        await done(high)
        assert low.num_retractions == 1 and not low.finished
        await done(low)
        assert e.finished == ["high", "level", "low"]
        assert e.scheduler.retracted_total == 1 and level.num_retractions == 0
        assert low.output_ids == alone(e.model, PROMPT, low_params)
        # It resumed from the prefix cache: the context it had, but its last token, was not recomputed.
        assert low.cached_tokens >= len(PROMPT)


async def test_the_lowest_priority_goes_first_and_no_more_than_needed() -> None:
    """Two slots, running at priorities 0 and 5: a request of 30 needs one slot and retracts only the
    priority-0 request."""
    async with Engine(max_running=2) as e:
        a = await e.start("a", 0, params(1, 40))
        b = await e.start("b", 5, params(2, 40))
        await tokens(a, 2)
        urgent = await e.start("urgent", 30, params(3, 4))
        await done(urgent)
        assert (a.num_retractions, b.num_retractions, e.scheduler.retracted_total) == (1, 0, 1)
        await done(a)
        await done(b)


async def test_preemption_for_room_takes_several_or_none() -> None:
    """KV room, not slots: two running requests reserve 48 tokens each of 100. A request needing 60
    retracts both when both are low enough (one would free too little), and none when only one is."""
    need_48 = params(1, 40)  # 8 prompt tokens + 40
    async with Engine(max_running=4, kv_capacity=100) as e:
        a = await e.start("a", 0, need_48)
        b = await e.start("b", 1, params(2, 40))
        await tokens(a, 2)
        big = await e.start("big", 20, params(3, 52))
        await done(big)
        assert (a.num_retractions, b.num_retractions) == (1, 1)
        await asyncio.gather(done(a), done(b))
        assert e.finished[0] == "big"
    async with Engine(max_running=4, kv_capacity=100) as e:
        a = await e.start("a", 0, need_48)
        b = await e.start("b", 15, params(2, 40))  # 20 - 15 is within the threshold
        await tokens(a, 2)
        big = await e.start("big", 20, params(3, 52))
        await asyncio.gather(done(a), done(b), done(big))
        assert e.scheduler.retracted_total == 0 and e.finished[-1] == "big"


async def test_disabled_preemption_only_orders_the_queue() -> None:
    async with Engine(max_running=1, threshold=None) as e:
        low = await e.start("low", 0, params(1, 30))
        await tokens(low, 2)
        high = await e.start("high", 100, params(2, 4))
        await asyncio.gather(done(low), done(high))
        assert e.finished == ["low", "high"] and e.scheduler.retracted_total == 0


def test_options_follow_sglangs_flags() -> None:
    assert parse_options([]).priority_scheduling_preemption_threshold == 10
    on = parse_options(["--enable-priority-scheduling", "--priority-scheduling-preemption-threshold", "0"])
    assert on.priority_scheduling_preemption_threshold == 0 and not on.disable_priority_preemption
    assert parse_options(["--enable-priority-scheduling", "--disable-priority-preemption"]).disable_priority_preemption
    with pytest.raises(SystemExit):  # a negative threshold would let equals preempt one another
        parse_options(["--priority-scheduling-preemption-threshold", "-1"])
