"""The reference engine's mixed steps: the prefills of the requests admitted in one step run in the
same forward as the running requests' decodes (`TinyLM.extend`, `Scheduler._extend`), and give the
logits and tokens of each sequence computed alone: with cached prefixes of different lengths, with
per-row LoRA adapters, in any row order. And the prefix cache's sorted lookup finds what a pass over
every entry finds.

In process (no HTTP): the scheduler's loop runs on the test's event loop, so a test can hold
requests back and admit several in one step while others decode.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any, Optional

import numpy as np
import pytest
import torch

from laminar import error_codes
from laminar.errors import LaminarError
from laminar.testing import KVCache, TinyLM, TinyLMConfig
from laminar.testing.engine.prefix_cache import PrefixCache
from laminar.testing.engine.protocol import GenerateRequest
from laminar.testing.engine.sampling import SamplingParams, sample
from laminar.testing.engine.scheduler import Scheduler, Sequence
from laminar.testing.lora import LoraConfig, LoraWeights, applied, applied_per_row

CONFIG = TinyLMConfig(vocab_size=16, d_model=32, n_layers=2, n_heads=2, max_seq_len=64)


def model(seed: int = 0) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM(CONFIG).eval()


def adapter(seed: int) -> LoraWeights:
    """Random A and B on every block's linear layers (B non-zero, unlike a fresh PEFT adapter, so it changes the logits)."""
    g = torch.Generator().manual_seed(seed)
    d, f, r = CONFIG.d_model, CONFIG.ff_dim, 2
    shapes = {"attn.qkv": (3 * d, d), "attn.out": (d, d), "mlp.fc_in": (f, d), "mlp.fc_out": (d, f)}
    modules = {
        f"layers.{i}.{name}": (torch.randn(r, fan_in, generator=g) * 0.3, torch.randn(fan_out, r, generator=g) * 0.3)
        for i in range(CONFIG.n_layers)
        for name, (fan_out, fan_in) in shapes.items()
    }
    return LoraWeights(LoraConfig(r=r, lora_alpha=4), modules)


def ids(seed: int, n: int) -> list[int]:
    return torch.randint(0, CONFIG.vocab_size, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


# ---- the model: one forward for prefills and decodes ---------------------------------------------


@pytest.mark.parametrize("decodes_first", [True, False])
def test_extend_gives_each_row_the_logits_and_kv_of_prefill_and_decode_alone(decodes_first: bool) -> None:
    """Rows: three decodes at different positions, and prefills after cached prefixes of 0, 5 and
    17 tokens (one of them a run of one token), in the order the scheduler makes (decodes first)
    and in a mixed order (every row then goes through the padded group)."""
    m = model()
    # (sequence, cached prefix length, tokens added this step): a decode adds the sequence's last token.
    rows = [(ids(1, 30), 29, 1), (ids(2, 12), 11, 1), (ids(3, 41), 40, 1), (ids(4, 9), 0, 9), (ids(5, 23), 5, 18), (ids(6, 18), 17, 1), (ids(7, 26), 17, 9)]
    if not decodes_first:
        rows = [rows[i] for i in (3, 0, 4, 1, 5, 2, 6)]
    alone, together = KVCache(CONFIG, len(rows)), KVCache(CONFIG, len(rows))
    expected = []
    for slot, (seq, cached, added) in enumerate(rows):
        assert cached + added == len(seq)
        for cache in (alone, together):
            if cached:
                m.prefill(torch.tensor(seq[:cached]), cache, slot)
        if added == 1 and cached:
            expected.append(m.decode(torch.tensor(seq[-1:]), torch.tensor([slot]), torch.tensor([cached]), alone)[0])
        else:
            expected.append(m.prefill(torch.tensor(seq[cached:]), alone, slot, cached))
    tokens = torch.tensor([t for seq, cached, _ in rows for t in seq[cached:]])
    logits = m.extend(tokens, [added for _, _, added in rows], list(range(len(rows))), [cached for _, cached, _ in rows], together)
    expected_logits = torch.stack(expected)
    assert logits.shape == (len(rows), CONFIG.vocab_size)
    assert torch.allclose(logits, expected_logits, atol=1e-5)
    assert torch.equal(logits.argmax(-1), expected_logits.argmax(-1))
    # And the full forward of each whole sequence agrees too.
    for row, (seq, _, _) in enumerate(rows):
        assert torch.allclose(logits[row], m(torch.tensor([seq]))[0, -1], atol=1e-5)
    # The keys and values each row leaves in its slot are the ones computed alone.
    for slot, (seq, _, _) in enumerate(rows):
        assert torch.allclose(together.keys[:, slot, :, : len(seq)], alone.keys[:, slot, :, : len(seq)], atol=1e-5)
        assert torch.allclose(together.values[:, slot, :, : len(seq)], alone.values[:, slot, :, : len(seq)], atol=1e-5)


def test_extend_applies_each_rows_lora_adapter_to_its_own_tokens() -> None:
    """The forward is packed (one row per token): the scheduler gives `applied_per_row` an entry
    per token; each row's logits are those of its prefill alone with its adapter."""
    m = model()
    x, y = adapter(1), adapter(2)
    rows: list[tuple[list[int], int, Optional[LoraWeights]]] = [
        (ids(10, 14), 13, x),
        (ids(11, 7), 6, None),
        (ids(12, 12), 0, y),
        (ids(13, 20), 8, x),
        (ids(14, 5), 0, None),
    ]
    expected = []
    cache = KVCache(CONFIG, len(rows))
    for slot, (seq, cached, lora) in enumerate(rows):
        with applied_per_row(m, [lora]):
            if cached:
                m.prefill(torch.tensor(seq[:cached]), cache, slot)
            expected.append(m.prefill(torch.tensor(seq), KVCache(CONFIG, 1), 0))
    lengths = [len(seq) - cached for seq, cached, _ in rows]
    with applied_per_row(m, [lora for (_, _, lora), n in zip(rows, lengths) for _ in range(n)]):
        logits = m.extend(torch.tensor([t for seq, cached, _ in rows for t in seq[cached:]]), lengths, list(range(len(rows))), [c for _, c, _ in rows], cache)
    assert torch.allclose(logits, torch.stack(expected), atol=1e-5)
    with applied(m, x):
        assert not torch.allclose(logits[1], m.prefill(torch.tensor(rows[1][0]), KVCache(CONFIG, 1), 0), atol=1e-3)  # the adapter matters


def test_extend_refuses_runs_that_do_not_fit() -> None:
    m = model()
    cache = KVCache(CONFIG, 2)
    for tokens, lengths, starts in ((torch.tensor([1, 2, 3]), [1, 1], [0, 0]), (torch.tensor([1, 2]), [2, 0], [0, 0]), (torch.tensor([1, 2]), [1, 1], [0, 64])):
        with pytest.raises(LaminarError) as err:
            m.extend(tokens, lengths, [0, 1], starts, cache)
        assert err.value.code == error_codes.INVALID_ARG


# ---- the scheduler: admissions in the decode step ------------------------------------------------


def reference(m: TinyLM, lora: Optional[LoraWeights], input_ids: list[int], params: SamplingParams, n: int) -> tuple[list[int], list[float]]:
    """One sequence alone, the naive way: the full forward of the whole context for every token."""
    context, tokens, logprobs = list(input_ids), [], []
    with applied_per_row(m, [lora]), torch.no_grad():
        for _ in range(n):
            logits = m(torch.tensor([context]))[0, -1].numpy()
            token, logprob = sample(logits, params, len(context), np.random.default_rng(0))  # seeded: the generator is not drawn from
            context.append(token)
            tokens.append(token)
            logprobs.append(logprob)
    return tokens, logprobs


def params(seed: int, n: int) -> SamplingParams:
    return SamplingParams(max_new_tokens=n, temperature=1.0, ignore_eos=True, sampling_seed=seed)


async def finished(seq: Sequence) -> None:
    while not seq.finished:
        seq.changed.clear()
        await seq.changed.wait()


async def test_requests_admitted_beside_decodes_generate_what_they_generate_alone() -> None:
    """Two conversations' first turns fill the prefix cache; then, while two requests decode, three
    are admitted in one step: a conversation's next turn (extends a cached entry whole), a sibling
    of the other's prompt (shares 6 tokens with an entry) and a fresh prompt; with per-row adapters.
    Every request's tokens and logprobs are those of the naive one-sequence generation."""
    m = model(3)
    x, y = adapter(5), adapter(6)
    scheduler = Scheduler(kv_capacity=4096, max_running=8, eos_token_id=0, seed=0, fallback_config=None)
    scheduler.install(m, CONFIG, None, "1")
    steps: list[list[int]] = []
    extend = scheduler._extend

    def recorded(model_: TinyLM, work: list[Any]) -> Any:
        steps.append([len(w.tokens) for w in work])
        return extend(model_, work)

    scheduler._extend = recorded  # type: ignore[method-assign]
    loop = asyncio.ensure_future(scheduler.run())

    async def start(input_ids: list[int], p: SamplingParams, lora: Optional[LoraWeights]) -> Sequence:
        seq = scheduler.create(GenerateRequest(None, input_ids, p, True, False), lora)
        await scheduler.enter(seq)
        return seq

    cases: list[tuple[Sequence, list[int], SamplingParams, Optional[LoraWeights]]] = []
    try:
        first = [ids(20, 7), [9, *ids(21, 8)]]
        turns = [await start(first[0], params(1, 5), x), await start(first[1], params(2, 5), None)]
        for seq in turns:
            await finished(seq)
        cases += [(s, first[i], params(i + 1, 5), lora) for i, (s, lora) in enumerate(zip(turns, (x, None)))]
        assert scheduler.cached_prefix_tokens > 0

        running = [await start(ids(30, 6), params(3, 24), None), await start(ids(31, 10), params(4, 24), x)]
        cases += [(running[0], ids(30, 6), params(3, 24), None), (running[1], ids(31, 10), params(4, 24), x)]
        while len(running[0].output_ids) < 3:
            running[0].changed.clear()
            await running[0].changed.wait()
        # Three entered without yielding to the loop: its next iteration admits them together.
        next_turn = first[0] + turns[0].output_ids + [3, 4, 5]
        sibling = first[1][:7] + ids(22, 5)
        fresh = [15, *ids(23, 11)]
        admitted = [await start(next_turn, params(1, 8), x), await start(sibling, params(5, 8), None), await start(fresh, params(6, 8), y)]
        cases += [(s, i, p, lora) for s, i, p, lora in zip(admitted, (next_turn, sibling, fresh), (params(1, 8), params(5, 8), params(6, 8)), (x, None, y))]
        for seq, *_ in cases:
            await finished(seq)
    finally:
        await scheduler.stop()
        loop.cancel()

    # The cache served the next turn whole and the sibling's shared prompt, nothing of the fresh prompt.
    assert [s.cached_tokens for s in admitted] == [len(first[0]) + 5 - 1, 7, 0]
    # One step decoded the two running requests and prefilled the three admitted ones.
    assert [1, 1, 3 + 1, len(sibling) - 7, len(fresh)] in steps, steps
    for seq, input_ids, p, lora in cases:
        tokens, logprobs = reference(m, lora, input_ids, p, p.max_new_tokens or 0)
        assert seq.output_ids == tokens
        assert seq.logprobs == pytest.approx(logprobs, abs=1e-4)


# ---- the prefix cache's lookup -------------------------------------------------------------------


def test_prefix_cache_lookup_matches_a_pass_over_every_entry() -> None:
    """Random inserts, removals and lookups over a small alphabet (many shared prefixes, three
    adapters, one often down to no entry or one): the sorted lookup finds the longest shared prefix a pass over every entry finds,
    prefers an entry the request extends whole, and insert drops exactly the entries it covers."""
    rnd = random.Random(7)
    cache = PrefixCache()
    entries: dict[int, tuple[Optional[str], list[int]]] = {}
    free = list(range(40))

    def shared(a: list[int], b: list[int]) -> int:
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    def seq() -> list[int]:
        base = rnd.choice([e[1] for e in entries.values()]) if entries and rnd.random() < 0.7 else []
        return base[: rnd.randint(0, len(base))] + [rnd.randint(0, 3) for _ in range(rnd.randint(1, 6))]

    for _ in range(3000):
        adapter_key = rnd.choice([None, "a", "b"])
        op = rnd.random()
        if op < 0.4 and free:
            tokens = seq()
            covered = sorted(s for s, (a, t) in entries.items() if a == adapter_key and tokens[: len(t)] == t)
            slot = free.pop()
            assert sorted(cache.insert(adapter_key, tokens, slot)) == covered
            for s in covered:
                del entries[s]
                free.append(s)
            entries[slot] = (adapter_key, tokens)
        elif op < 0.55 and entries:
            slot = rnd.choice(list(entries))
            assert cache.remove(next(e for e in cache._entries.values() if e.slot == slot)) == slot
            del entries[slot]
            free.append(slot)
        else:
            query = seq() + [rnd.randint(0, 3)]
            best = max((shared(t, query[:-1]) for a, t in entries.values() if a == adapter_key), default=0)
            hit = cache.match(adapter_key, query)
            if best == 0:
                assert hit is None
                continue
            assert hit is not None and hit.length == best and hit.entry.adapter == adapter_key
            assert shared(hit.entry.tokens, query[:-1]) == best
            can_be_whole = any(a == adapter_key and len(t) == best and query[:best] == t for a, t in entries.values())
            assert hit.whole == can_be_whole
        assert len(cache) == len(entries)
        assert cache.tokens == sum(len(t) for _, t in entries.values())


def test_prefix_cache_entry_replaced_by_its_extension_is_found() -> None:
    """A conversation's next turn: its entry covers the previous turn's (the only one of its
    adapter), which is dropped; lookups find the new one, whole, and nothing after it is removed."""
    cache = PrefixCache()
    assert cache.insert(None, [1, 2, 3], 0) == []
    assert cache.insert("a", [1, 2], 5) == []
    assert cache.insert(None, [1, 2, 3, 4], 1) == [0]
    hit = cache.match(None, [1, 2, 3, 4, 9])
    assert hit is not None and hit.entry.slot == 1 and hit.length == 4 and hit.whole
    partial = cache.match(None, [1, 2, 7, 7])
    assert partial is not None and partial.entry.slot == 1 and partial.length == 2 and not partial.whole
    assert cache.match("a", [1, 2, 3]) is not None and cache.match("b", [1, 2, 3]) is None
    cache.remove(hit.entry)
    assert cache.match(None, [1, 2, 3, 4, 9]) is None and cache.tokens == 2 and len(cache) == 1
