"""Continuous batching for the reference engine.

One asyncio task (`Scheduler.run`) owns the state and runs the model's steps (prefill, decode,
sampling) itself: a TinyLM step takes a fraction of a millisecond, and handing it to a thread and
back cost a quarter as much again (0.82 against 0.70 ms a step at two sequences, measured). Loading
a directory, which takes seconds, runs in a worker thread so that HTTP stays responsive; /slow_down's
time is awaited after the step, HTTP served meanwhile, as a GPU's step leaves the CPU free. Every
iteration:
admit waiting requests while a slot is free and the KV capacity allows (FCFS, or by request
`priority` with priority scheduling; a request reserves prompt + max_new_tokens tokens, so an
admitted request is never evicted for room, only preempted for priority, below),
then run one model step for all of them, the admitted requests' prefills and the running ones'
decodes in one forward (a mixed batch, `TinyLM.extend`; a step without admissions is a plain
decode), and hand each new token to its request. Aborts (`/abort_request`, a client that disconnects, `/pause_generation
{mode: "abort"}`) free the slot and KV at once; a step that was in flight for an aborted request is
discarded.

Prefix cache (off with --disable-radix-cache): a finished sequence leaves its KV in the cache
(`prefix_cache.py`); a request sharing a prefix with a cached sequence of the same adapter reuses
its keys and values and prefills only the rest. Cached tokens are evictable: they count in no
reservation and are evicted, least recently used first, when a request needs their room or slot.
New weights flush the cache; a sequence whose KV spans two weight versions (paused in place across
an update) is not cached.

Priority preemption (SGLang's, on with priority scheduling unless --disable-priority-preemption):
when the head of the queue finds no slot or no room, running requests whose priority is lower
than the head's by more than --priority-scheduling-preemption-threshold are retracted, the lowest
first (the latest arrived among equals), as many as the head needs and only if that many are
enough. A retracted request goes back to the queue in priority order; its KV goes to the prefix
cache (evictable), so that it resumes with little or no prefill, and its seeded draws continue
token for token.

New requests pass a gate first: it is closed while generation is paused and while a weight update
waits for the engine to drain, as SGLang holds them in its tokenizer manager.

Weight updates follow SGLang's model-update lock: when not paused, the update waits until every
request in the engine has finished (new ones wait at the gate), then loads and swaps, so a request
never changes weights; when paused, it loads and swaps at once, and the held requests continue on
the new weights after continue (keeping their KV cache in `in_place` mode, recomputing it in
`retract` mode).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

import numpy as np
import torch

from ...errors import LaminarError
from ..lora import LoraWeights, applied_per_row
from ..model import KVCache, TinyLM, TinyLMConfig
from .options import DEFAULT_PREEMPTION_THRESHOLD
from .prefix_cache import PrefixCache, PrefixMatch
from .protocol import GenerateRequest, InvalidRequest, finish_abort, finish_length, finish_stop
from .sampling import SamplingParams, sample
from .weights import LOAD_FORMATS, load_weights

log = logging.getLogger("laminar.testing.engine")

T = TypeVar("T")

PAUSE_MODES = ("abort", "retract", "in_place")

THROUGHPUT_WINDOW_S = 5.0
"""`sglang:gen_throughput` counts the tokens generated in this many seconds."""

CACHED_SEQUENCES_PER_RUNNING = 4
"""The prefix cache has at least this many slots per `max_running` (cached_slot_count), and the KV
cache starts with these (it grows toward cached_slot_count as the prefix cache fills)."""


def cached_slot_count(kv_capacity: int, max_seq_len: int, max_running: int) -> int:
    """KV slots kept for the prefix cache beside the `max_running` of live requests.

    SGLang's radix cache is bounded by the KV tokens it may hold (what the live requests leave of
    `max_total_num_tokens`), not by a count of sequences. Here each cached sequence occupies a slot
    of its own, so there are enough slots for the token bound to be the one that binds while the
    cached sequences average half the longest context or more: 2 * kv_capacity / max_seq_len, at
    least CACHED_SEQUENCES_PER_RUNNING per running request. (Four per running request alone held 8
    sequences on the agentic bench's engines of `--max-running 2`, whose agents keep up to 32
    trajectories at their tools each: most contexts were evicted before their next turn;
    docs/performance/agentic.md.) The slots' memory is then at most twice the KV of
    `kv_capacity` tokens, reached only when the cache holds that many sequences: the KV cache
    starts at CACHED_SEQUENCES_PER_RUNNING per running request and doubles as needed."""
    return max(CACHED_SEQUENCES_PER_RUNNING * max_running, -(-2 * kv_capacity // max_seq_len))


class Sequence:
    """One /generate request from arrival to finish."""

    def __init__(self, rid: str, request: GenerateRequest, max_new_tokens: int, weight_version: Optional[str], adapter: Optional[LoraWeights] = None) -> None:
        self.rid = rid
        self.adapter = adapter
        """The LoRA adapter the request runs with (None: the base model), fixed for its life.
        Keys and values computed with an adapter differ from the base's (it changes qkv): the
        prefix cache keys cached prefixes by it (`prefix_key`: `lora_id`, unique per load)."""
        self.input_ids = list(request.input_ids)
        self.params: SamplingParams = request.sampling
        self.return_logprob = request.return_logprob
        self.max_new_tokens = max_new_tokens
        self.output_ids: list[int] = []
        self.logprobs: list[float] = []
        self.finish_reason: Optional[dict[str, Any]] = None
        self.slot: Optional[int] = None
        self.kv_reserved = 0
        self.prefill_start = 0
        """Positions of the context whose KV came from the prefix cache at the last admission."""
        self.cached_tokens = 0
        """Prompt tokens served from the prefix cache (meta_info.cached_tokens)."""
        self.kv_epoch = -1
        """The scheduler's weight epoch when the slot's KV was started: cached only if still current."""
        self.num_retractions = 0
        self.weight_version = weight_version
        """The version that generated the last token (the serving one until the first)."""
        self.priority = request.priority if request.priority is not None else 0
        self.created = time.monotonic()
        self.finished_at: Optional[float] = None
        self.changed = asyncio.Event()
        """Set whenever there is something new to send (tokens or the finish)."""

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def context(self) -> list[int]:
        return self.input_ids + self.output_ids

    @property
    def prefix_key(self) -> Optional[str]:
        """What its cached prefixes are keyed by beside the tokens: the adapter's load (None: the base)."""
        return self.adapter.lora_id if self.adapter is not None else None

    @property
    def kv_tokens(self) -> int:
        """Tokens whose keys and values the sequence holds (or is about to)."""
        return len(self.input_ids) + len(self.output_ids) if self.slot is not None else 0


@dataclass(frozen=True)
class _Work:
    """What a step needs of one sequence (a snapshot: the state may move on while /slow_down's time passes)."""

    seq: Sequence
    tokens: list[int]
    """prefill: the context after its cached prefix; decode: the last token."""
    position: int
    """prefill: the first position to compute (the cached prefix's length); decode: the last token's position."""
    slot: int
    params: SamplingParams


class Scheduler:
    """The engine's state and its batching loop. Every method runs on the event loop's thread."""

    def __init__(
        self,
        kv_capacity: int,
        max_running: int,
        eos_token_id: int,
        seed: int,
        fallback_config: Optional[TinyLMConfig],
        priority_scheduling: bool = False,
        prefix_cache: bool = True,
        preemption_threshold: Optional[int] = DEFAULT_PREEMPTION_THRESHOLD,
    ) -> None:
        self.kv_capacity = kv_capacity
        self.priority_scheduling = priority_scheduling
        """Waiting requests are admitted by `priority`, larger first (SGLang's --enable-priority-scheduling)."""
        self.preemption_threshold = preemption_threshold if priority_scheduling else None
        """With priority scheduling, a waiting request retracts running ones whose priority is lower
        by more than this, for a slot or room (None: never; SGLang's --disable-priority-preemption)."""
        self.max_running = max_running
        self.eos_token_id = eos_token_id
        self.fallback_config = fallback_config
        self.model: Optional[TinyLM] = None
        self.config: Optional[TinyLMConfig] = None
        self.cache: Optional[KVCache] = None
        self.model_path: Optional[str] = None
        self.weight_version: Optional[str] = None
        self.paused = False
        self.pause_mode: Optional[str] = None
        self.forward_sleep_time = 0.0
        """Seconds each step lasts beyond its compute, awaited (SGLang's /slow_down, for tests)."""

        self.held: dict[str, Sequence] = {}
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.running: list[Sequence] = []
        self.by_rid: dict[str, Sequence] = {}
        self.free_slots: list[int] = []
        self.max_slots = 0
        """Slots the KV cache may grow to (set with the first model: cached_slot_count)."""
        self.kv_reserved = 0
        self.prefix_cache: Optional[PrefixCache] = PrefixCache() if prefix_cache else None
        self.weight_epoch = 0
        """Counts installed models: KV computed under an older epoch is never reused."""

        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.cached_tokens_total = 0
        """Prompt tokens whose KV came from the prefix cache."""
        self.retracted_total = 0
        """Requests retracted from running: by a pause in `retract` mode, or preempted for priority."""
        self.computed_prompt_tokens_total = 0
        """Prompt tokens prefilled (computed) at admission; with the cached ones, the hit rate's denominator."""
        self._generated: collections.deque[tuple[float, int]] = collections.deque()

        self._rng = np.random.default_rng(seed)
        self._next_rid = 0
        self._updating = False
        self._stopping = False
        self._gate = asyncio.Event()
        self._gate.set()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._step_done = asyncio.Event()
        self._step_done.set()
        self._update_lock = asyncio.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-load")

    # ---- requests ------------------------------------------------------------------------------

    def create(self, request: GenerateRequest, adapter: Optional[LoraWeights] = None) -> Sequence:
        """Registers a request (held at the gate until `enter`); raises InvalidRequest if it can never run.
        `adapter`: the LoRA adapter it runs with (the server resolves `lora_path` and counts its users)."""
        if self.config is None:
            raise RuntimeError("no model loaded")
        rid = request.rid
        if rid is None:
            self._next_rid += 1
            rid = f"{self._next_rid:032x}"
        if rid in self.by_rid:
            raise InvalidRequest(f"Duplicate request ID: {rid} is still in flight")
        context = self.config.max_seq_len
        prompt = len(request.input_ids)
        if prompt >= context:
            raise InvalidRequest(f"The input ({prompt} tokens) is longer than the model's context length ({context} tokens).")
        wanted = request.sampling.max_new_tokens
        max_new = context - prompt if wanted is None else min(wanted, context - prompt)
        if prompt + max_new > self.kv_capacity:
            raise InvalidRequest(
                f"The request needs {prompt + max_new} tokens of KV cache (prompt + max_new_tokens), more than the engine's capacity of {self.kv_capacity}."
            )
        seq = Sequence(rid, request, max_new, self.weight_version, adapter)
        self.by_rid[rid] = seq
        self.held[rid] = seq
        self.requests_total += 1
        return seq

    async def enter(self, seq: Sequence) -> None:
        """Waits at the gate (closed while paused or draining for an update), then queues the request."""
        while not self._gate.is_set() and not seq.finished:
            gate = asyncio.ensure_future(self._gate.wait())
            finished = asyncio.ensure_future(seq.changed.wait())  # set only by an abort while held
            try:
                await asyncio.wait({gate, finished}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                gate.cancel()
                finished.cancel()
        if seq.finished:
            return
        del self.held[seq.rid]
        self._queue(seq)
        self.prompt_tokens_total += len(seq.input_ids)
        self._changed_queues()

    def _queue(self, seq: Sequence) -> None:
        """Into the waiting queue: at its end (FCFS), or with priority scheduling behind every
        waiting request of at least its priority (FCFS among equals), which is the order in which
        SGLang's priority policy admits them. The head still waits for room as under FCFS: a large
        request of high priority is not passed by smaller ones (but may preempt, `_preempt_for`)."""
        if not self.priority_scheduling:
            self.waiting.append(seq)
            return
        at = next((i for i, other in enumerate(self.waiting) if other.priority < seq.priority), len(self.waiting))
        self.waiting.insert(at, seq)

    def abort(self, rid: str, message: str = "Aborted by AbortReq.") -> bool:
        """Finishes a request with an abort (wherever it is); False if no such request is in flight."""
        seq = self.by_rid.get(rid)
        if seq is None:
            return False
        self._finish(seq, finish_abort(message))
        return True

    def abort_all(self, message: str, include_held: bool = False) -> int:
        victims = [*self.running, *self.waiting, *(self.held.values() if include_held else ())]
        for seq in victims:
            self._finish(seq, finish_abort(message))
        return len(victims)

    def _finish(self, seq: Sequence, reason: dict[str, Any]) -> None:
        if seq.finished:
            return
        seq.finish_reason = reason
        seq.finished_at = time.monotonic()
        self.held.pop(seq.rid, None)
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self._release(seq)
        self.by_rid.pop(seq.rid, None)
        seq.changed.set()
        self._changed_queues()

    def _release(self, seq: Sequence) -> None:
        """Frees a sequence's reservation; its slot goes to the prefix cache (holding the context
        but its last token, whose KV no step has written yet) or back to the free slots."""
        if seq.slot is not None:
            context = seq.context
            if self.prefix_cache is not None and seq.kv_epoch == self.weight_epoch and len(context) > 1:
                self.free_slots += self.prefix_cache.insert(seq.prefix_key, context[:-1], seq.slot)
            else:
                self.free_slots.append(seq.slot)
            seq.slot = None
        self.kv_reserved -= seq.kv_reserved
        seq.kv_reserved = 0

    def flush_prefix_cache(self, prefix_key: Optional[str] = None) -> int:
        """Drops the cached prefixes (only those of one adapter load, `lora_id`, when given);
        returns how many. SGLang's /flush_cache."""
        if self.prefix_cache is None:
            return 0
        freed = self.prefix_cache.clear() if prefix_key is None else self.prefix_cache.drop_adapter(prefix_key)
        self.free_slots += freed
        return len(freed)

    def _changed_queues(self) -> None:
        if self.waiting or self.running:
            self._idle.clear()
        else:
            self._idle.set()
        self._wake.set()

    # ---- pause, continue, weights --------------------------------------------------------------

    def _set_gate(self) -> None:
        if self.paused or self._updating or self._stopping:
            self._gate.clear()
        else:
            self._gate.set()

    async def _step_boundary(self) -> None:
        """Returns when no model step is in flight (the loop starts none while paused)."""
        while not self._step_done.is_set():
            await self._step_done.wait()

    async def pause(self, mode: str) -> None:
        """Stops the loop after the step in flight; `abort` ends every request, `retract` frees their KV."""
        if mode not in PAUSE_MODES:
            raise InvalidRequest(f"Invalid mode: {mode!r}. Expected one of {list(PAUSE_MODES)}.")
        self.paused = True
        self.pause_mode = mode
        self._set_gate()
        await self._step_boundary()
        if mode == "abort":
            self.abort_all("Aborted by pause_generation.")
        elif mode == "retract":
            for seq in reversed(self.running):
                self._release(seq)
                seq.num_retractions += 1
                self.waiting.appendleft(seq)
            self.retracted_total += len(self.running)
            self.running.clear()
            self._changed_queues()

    def resume(self) -> None:
        self.paused = False
        self.pause_mode = None
        self._set_gate()
        self._wake.set()

    async def update_weights(self, model_path: str, weight_version: Optional[str], load_format: Optional[str], abort_all: bool) -> tuple[bool, str]:
        """Loads a model directory; on failure the previous weights and version stay."""
        async with self._update_lock:
            if load_format not in LOAD_FORMATS:
                return False, f"Failed to update weights: load_format {load_format!r} is not supported by the reference engine (safetensors only)."
            if abort_all:
                self.abort_all("Aborted by update_weights_from_disk.")
            drain = not self.paused
            if drain:
                self._updating = True
                self._set_gate()
            try:
                if drain:
                    await self._idle.wait()
                if self._stopping:
                    return False, "Failed to update weights: the server is shutting down."
                try:
                    model, config = await self._in_worker(load_weights, model_path, self.config, self.fallback_config)
                except LaminarError as err:
                    log.warning("update_weights_from_disk %s refused: %s", model_path, err)
                    return False, f"Failed to update weights: {err}"
                await self._step_boundary()
                self.install(model, config, model_path, weight_version)
            finally:
                if drain:
                    self._updating = False
                    self._set_gate()
            message = "Succeeded to update model weights."
            if weight_version is not None:
                message += f" Weight version updated to {weight_version}."
            log.info("weights from %s, version %s", model_path, self.weight_version)
            return True, message

    def install(self, model: TinyLM, config: TinyLMConfig, model_path: Optional[str], weight_version: Optional[str]) -> None:
        """Swaps a validated model in (between steps). The first model sizes the KV cache."""
        if self.config is None:
            self.config = config
            cached = cached_slot_count(self.kv_capacity, config.max_seq_len, self.max_running) if self.prefix_cache is not None else 0
            self.max_slots = self.max_running + cached
            slots = min(self.max_slots, self.max_running * (1 + CACHED_SEQUENCES_PER_RUNNING))
            self.cache = KVCache(config, slots)
            self.free_slots = list(range(slots - 1, -1, -1))
        # KV of the old weights must never be read again (SGLang flushes its cache on an update too).
        self.weight_epoch += 1
        self.flush_prefix_cache()
        self.model = model
        self.model_path = model_path
        if weight_version is not None:
            self.weight_version = weight_version
        self._wake.set()

    # ---- the loop ------------------------------------------------------------------------------

    async def _in_worker(self, fn: Callable[..., T], *args: Any) -> T:
        self._step_done.clear()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        finally:
            self._step_done.set()

    async def _step(self, fn: Callable[[TinyLM, list[_Work]], list[tuple[int, float]]], work: list[_Work]) -> list[tuple[int, float]]:
        """One model step on the loop's thread, then /slow_down's time, during which HTTP is served."""
        assert self.model is not None
        self._step_done.clear()
        try:
            results = fn(self.model, work)
            if self.forward_sleep_time > 0:
                await asyncio.sleep(self.forward_sleep_time)
            return results
        finally:
            self._step_done.set()

    def _can_step(self) -> bool:
        return not (self.paused or self._stopping or self.model is None) and bool(self.waiting or self.running)

    async def run(self) -> None:
        """The batching loop; returns after `stop`."""
        while not self._stopping:
            if not self._can_step():
                self._wake.clear()
                await self._wake.wait()
                continue
            admitted = set(self._admit())
            # The running sequences decode one token each; those just admitted prefill what the
            # prefix cache did not hold. All in one forward (a mixed batch, as vLLM's scheduler
            # makes): an admission costs its tokens' compute, not a model step of its own between
            # two decode steps, which on a small model costs about as much as the step itself.
            work = [
                _Work(s, s.context[s.prefill_start :], s.prefill_start, s.slot, s.params)
                if s in admitted
                else _Work(s, [s.context[-1]], len(s.context) - 1, s.slot, s.params)
                for s in self.running
                if s.slot is not None
            ]
            if admitted:
                self._apply(work, await self._step(self._extend, work))
            elif work:
                self._apply(work, await self._step(self._decode, work))
            else:
                # Waiting requests that cannot be admitted yet, none running: wait for a change.
                self._wake.clear()
                await self._wake.wait()
            await asyncio.sleep(0)

    def _admit(self) -> list[Sequence]:
        admitted: list[Sequence] = []
        while self.waiting:
            seq = self.waiting[0]
            need = len(seq.input_ids) + seq.max_new_tokens
            if not self._fits(need, 0, 0) and not self._preempt_for(seq, need):
                break  # the head (first come, or highest priority) waits for a slot or room
            self.waiting.popleft()
            if seq.max_new_tokens <= len(seq.output_ids):
                self._finish(seq, finish_length(seq.max_new_tokens))
                continue
            context = seq.context
            hit = self._make_room(need, self.prefix_cache.match(seq.prefix_key, context) if self.prefix_cache is not None else None)
            seq.slot = self._slot_for(hit)
            seq.prefill_start = hit.length if hit is not None else 0
            seq.cached_tokens = seq.prefill_start
            seq.kv_epoch = self.weight_epoch
            self.cached_tokens_total += seq.prefill_start
            self.computed_prompt_tokens_total += len(context) - seq.prefill_start
            seq.kv_reserved = need
            self.kv_reserved += need
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def _fits(self, need: int, freed_slots: int, freed_tokens: int) -> bool:
        """Whether a request reserving `need` tokens can be admitted once running requests holding
        `freed_slots` slots and `freed_tokens` reserved tokens have left."""
        return len(self.running) - freed_slots < self.max_running and self.kv_reserved - freed_tokens + need <= self.kv_capacity

    def _preempt_for(self, head: Sequence, need: int) -> bool:
        """Retracts running requests of lower priority (by more than the threshold), the lowest
        first and the latest arrived among equals, until `head` fits; nothing unless that many are
        enough. True if `head` fits now. Those admitted earlier in this round (whose prefill has not
        run) are never among them: the queue is in priority order, so they rank at least as high as
        the head, and the threshold is not negative."""
        if self.preemption_threshold is None:
            return False
        threshold = self.preemption_threshold
        candidates = sorted(
            (s for s in self.running if head.priority - s.priority > threshold),
            key=lambda s: (s.priority, -s.created),
        )
        victims: list[Sequence] = []
        freed = 0
        for victim in candidates:
            if self._fits(need, len(victims), freed):
                break
            victims.append(victim)
            freed += victim.kv_reserved
        if not victims or not self._fits(need, len(victims), freed):
            return False
        for victim in victims:
            self.running.remove(victim)
            self._release(victim)
            victim.num_retractions += 1
            self._queue(victim)
        self.retracted_total += len(victims)
        log.debug("preempted %d request(s) of priority %s for %s of priority %d", len(victims), [v.priority for v in victims], head.rid, head.priority)
        return True

    def _make_room(self, need: int, hit: Optional[PrefixMatch]) -> Optional[PrefixMatch]:
        """Evicts cached prefixes, least recently used first, until `need` more reserved tokens fit
        beside the cache (the caller checked that they fit beside the reservations). The hit's entry
        is spared; a partial hit whose entry cannot stay beside the reservation is given up (None)."""
        if self.prefix_cache is None:
            return None
        room = self.kv_capacity - self.kv_reserved - need
        if hit is not None and not hit.whole and len(hit.entry) > room:
            hit = None
        # A whole hit's tokens leave the cache for the request's reservation.
        keep = hit.entry if hit is not None else None
        taken = len(hit.entry) if hit is not None and hit.whole else 0
        while self.prefix_cache.tokens - taken > room:
            victim = self.prefix_cache.least_recent(keep)
            assert victim is not None, "the cache holds more than the room left, but only the hit"
            self.free_slots.append(self.prefix_cache.remove(victim))
        return hit

    def _slot_for(self, hit: Optional[PrefixMatch]) -> int:
        """The slot of a request being admitted: the entry's own when it extends the whole entry;
        else a free one (evicting the least recently used entry if none is) with a copy of the
        shared prefix. No model step is in flight here (the loop admits between steps)."""
        if hit is not None and hit.whole:
            assert self.prefix_cache is not None
            return self.prefix_cache.remove(hit.entry)
        if not self.free_slots:
            self._grow_kv()
        if not self.free_slots:
            assert self.prefix_cache is not None
            victim = self.prefix_cache.least_recent(hit.entry if hit is not None else None)
            assert victim is not None, "fewer running sequences than max_running, so some slot is free or cached"
            self.free_slots.append(self.prefix_cache.remove(victim))
        slot = self.free_slots.pop()
        if hit is not None:
            assert self.cache is not None and self.prefix_cache is not None
            self.cache.copy_prefix(hit.entry.slot, slot, hit.length)
            self.prefix_cache.touch(hit.entry)
        return slot

    def _grow_kv(self) -> None:
        """Doubles the KV cache's slots, up to `max_slots` (between steps: see _slot_for)."""
        assert self.cache is not None
        before = self.cache.num_slots
        after = min(self.max_slots, 2 * before)
        if after > before:
            self.cache.grow(after)
            self.free_slots.extend(range(after - 1, before - 1, -1))

    def _sample_rows(self, logits: torch.Tensor, work: list[_Work], positions: list[int]) -> list[tuple[int, float]]:
        rows = logits.numpy()
        return [sample(rows[i], w.params, positions[i], self._rng) for i, w in enumerate(work)]

    def _extend(self, model: TinyLM, work: list[_Work]) -> list[tuple[int, float]]:
        """A mixed step, each sequence's run of tokens (a prefill, or a decode's one) into its slot
        in one forward; the token after each run. Each row with its own LoRA adapter (the forward is
        packed: one adapter entry per token)."""
        assert self.cache is not None
        tokens = torch.tensor([t for w in work for t in w.tokens], dtype=torch.long)
        adapters = [w.seq.adapter for w in work]
        per_token = adapters if all(a is None for a in adapters) else [w.seq.adapter for w in work for _ in w.tokens]
        with applied_per_row(model, per_token):
            logits = model.extend(tokens, [len(w.tokens) for w in work], [w.slot for w in work], [w.position for w in work], self.cache)
        return self._sample_rows(logits, work, [w.position + len(w.tokens) for w in work])

    def _decode(self, model: TinyLM, work: list[_Work]) -> list[tuple[int, float]]:
        """One token for every running sequence, as one batch."""
        assert self.cache is not None
        tokens = torch.tensor([w.tokens[0] for w in work], dtype=torch.long)
        positions = torch.tensor([w.position for w in work], dtype=torch.long)
        slots = torch.tensor([w.slot for w in work], dtype=torch.long)
        # Each row with its own adapter (none: no hook at all, the base path as it was).
        with applied_per_row(model, [w.seq.adapter for w in work]):
            logits = model.decode(tokens, slots, positions, self.cache)
        return self._sample_rows(logits, work, [w.position + 1 for w in work])

    def _apply(self, work: list[_Work], results: list[tuple[int, float]]) -> None:
        now = time.monotonic()
        generated = 0
        for w, (token, logprob) in zip(work, results):
            seq = w.seq
            if seq.finished or seq.slot != w.slot:
                continue  # aborted or retracted while the step ran
            seq.output_ids.append(token)
            seq.logprobs.append(logprob)
            seq.weight_version = self.weight_version
            generated += 1
            if token == self.eos_token_id and not seq.params.ignore_eos:
                self._finish(seq, finish_stop(token))
            elif token in seq.params.stop_token_ids:
                self._finish(seq, finish_stop(token))
            elif len(seq.output_ids) >= seq.max_new_tokens:
                self._finish(seq, finish_length(seq.max_new_tokens))
            else:
                seq.changed.set()
        self.generation_tokens_total += generated
        self._generated.append((now, generated))
        while self._generated and self._generated[0][0] < now - THROUGHPUT_WINDOW_S:
            self._generated.popleft()

    # ---- figures -------------------------------------------------------------------------------

    @property
    def draining(self) -> bool:
        """Whether a weight update waits for the requests in the engine to finish (new ones are held)."""
        return self._updating

    @property
    def kv_used(self) -> int:
        """KV tokens held by running requests (cached prefixes are evictable and not counted, as SGLang's num_used_tokens)."""
        return sum(s.kv_tokens for s in self.running)

    @property
    def cached_prefix_tokens(self) -> int:
        return self.prefix_cache.tokens if self.prefix_cache is not None else 0

    def cache_hit_rate(self) -> float:
        """Prompt tokens served from the prefix cache over all prompt tokens admitted (0 before any)."""
        total = self.cached_tokens_total + self.computed_prompt_tokens_total
        return self.cached_tokens_total / total if total else 0.0

    def gen_throughput(self) -> float:
        """Tokens/s over the last THROUGHPUT_WINDOW_S seconds (0 when idle that long)."""
        now = time.monotonic()
        recent = [(t, n) for t, n in self._generated if t >= now - THROUGHPUT_WINDOW_S]
        if not recent:
            return 0.0
        span = max(now - recent[0][0], 1e-3)
        return sum(n for _, n in recent) / span

    async def stop(self) -> None:
        """Ends every request (abort), stops the loop and the loading thread."""
        self._stopping = True
        self._set_gate()
        self.abort_all("The server is shutting down.", include_held=True)
        self._wake.set()
        await self._step_boundary()
        self._executor.shutdown(wait=True)
