"""A vLLM logits processor for the real-engine tests: holds the engine at a token count until the
test opens a gate.

A test that pauses a running request must land its pause while the request still runs. On a fast
machine a tiny model streams hundreds of tokens per second, and the test only learns how far a
request got from the stream it reads, which lags the engine by however long the test's process
was busy: a pause sent at the 80th token read has reached an engine that had already finished all
800. With this processor loaded (``--logits-processors vllm_step_gate:StepGate``, this folder on
``PYTHONPATH``, ``LAMINAR_STEP_GATE`` naming a directory), a request is held once it has
generated ``at`` tokens, every engine step waiting, until the file ``open`` appears in that
directory. The test arms the gate by writing ``armed.json`` (``{"max_tokens": N, "at": K}``: the
requests with that ``max_tokens`` are held) before it sends the request, sends its pause when it
has read ``K`` tokens, then opens the gate; the engine meets the pause with the request unfinished.
With ``"count": C`` the engine is held only once ``C`` such requests have ``K`` tokens each: a test
that needs several requests running at its pause (a group's samples, sent one after the other)
does not have the first held at ``K`` before the others got their first token.

Logits pass through unchanged (logprobs are taken from the raw logits before any processor).
"""

from __future__ import annotations

import json
import os
import time

from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

#: How long a held engine waits for the gate before it goes on by itself, so that a test that
#: failed before opening the gate leaves a working server behind.
HOLD_LIMIT_S = 120.0


class StepGate(LogitsProcessor):
    def __init__(self, vllm_config, device, is_pin_memory):
        self.directory = os.environ.get("LAMINAR_STEP_GATE")
        # Batch index -> the held request's live list of output tokens, and the count it is held at.
        self.held: dict[int, tuple[list[int], int]] = {}
        # How many armed requests must have reached their count before the engine is held.
        self.requests = 1

    def is_argmax_invariant(self) -> bool:
        # False: applied to greedy requests too, so that any armed request is held.
        return False

    def _armed(self) -> tuple[int, int, int] | None:
        if self.directory is None:
            return None
        try:
            with open(os.path.join(self.directory, "armed.json")) as f:
                armed = json.load(f)
            return int(armed["max_tokens"]), int(armed["at"]), int(armed.get("count", 1))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for index in batch_update.removed:
            self.held.pop(index, None)
        armed = self._armed() if batch_update.added else None
        if armed is not None:
            self.requests = armed[2]
        for index, params, _prompt, output in batch_update.added:
            self.held.pop(index, None)
            if armed is not None and params is not None and params.max_tokens == armed[0]:
                self.held[index] = (output, armed[1])
        for a, b, direction in batch_update.moved:
            first, second = self.held.pop(a, None), self.held.pop(b, None)
            if first is not None:
                self.held[b] = first
            if direction == MoveDirectionality.SWAP and second is not None:
                self.held[a] = second

    def apply(self, logits):
        reached = sum(1 for output, at in self.held.values() if len(output) >= at)
        if self.directory is None or reached < max(self.requests, 1):
            return logits
        gate = os.path.join(self.directory, "open")
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.005)
        return logits
