"""Assembles a multi-turn trajectory as a Python engine loop produces it, as
src/data/codec/trajectory-builder.ts does in TypeScript: the prompt, then turn by turn the tokens
the model generated and the observations the environment returned. `build()` gives a writer's
input (a `Trajectory`, validated again by the writer) with flat tokens and logprobs (observation
tokens at logprob 0) and the segments that say which tokens are which::

    b = TrajectoryBuilder(prompt_ids)
    b.add_generated(ids, logprobs, weight_version=3, finish_reason="tool_call")
    b.add_observation(result_ids, tool="lookup", action_id="t-1/turn-0", status="ok", latency_ms=12)
    b.add_generated(ids2, logprobs2, weight_version=3, finish_reason="stop")
    await writer.write(b.build(id=..., prompt_id=..., group_id=..., sample_index=0, group_size=8, reward=1.0))
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np

from ... import error_codes
from ..errors import DataInputError
from . import arrays
from .segments import Segment
from .trajectory import Trajectory


def _ids(v: Any, what: str) -> np.ndarray:
    a = arrays.token_ids(v)
    if isinstance(a, arrays.Problem):
        raise DataInputError(error_codes.BAD_APPEND, f"{what}: {a.issues[0][1]}", {})
    return a


class TrajectoryBuilder:
    """A trajectory turn by turn; `tokens` is the context the engine continues from."""

    def __init__(self, prompt_tokens: Any) -> None:
        prompt = _ids(prompt_tokens, "prompt tokens")
        self._tokens: List[np.ndarray] = [prompt]
        self._logprobs: List[np.ndarray] = [np.zeros(len(prompt), dtype=np.float32)]
        self._segments: List[Segment] = []
        self.prompt_length = len(prompt)

    @classmethod
    def resume(cls, prompt_tokens: Any, tokens: Any, logprobs: Any, segments: Sequence[Segment]) -> "TrajectoryBuilder":
        """Continues a trajectory from its response so far and its closed segments (as the
        partial pool's log holds them). Tokens after the last segment are a turn in progress:
        they are not taken; pass them with the rest of that turn to `add_generated`."""
        b = cls(prompt_tokens)
        ids, lps = _ids(tokens, "tokens"), np.asarray(logprobs, dtype=np.float32)
        at = 0
        for s in segments:
            end = at + int(s["length"])
            if s["kind"] == "generated":
                b.add_generated(ids[at:end], lps[at:end], weight_version=s["weightVersion"], finish_reason=s["finishReason"])
            else:
                a = s["action"]
                b.add_observation(ids[at:end], tool=a["tool"], action_id=a["actionId"], status=a["status"], latency_ms=a["latencyMs"])
            at = end
        return b

    @property
    def tokens(self) -> np.ndarray:
        """Prompt and response so far (int32)."""
        return np.concatenate(self._tokens)

    @property
    def response_length(self) -> int:
        return sum(len(t) for t in self._tokens) - self.prompt_length

    @property
    def segments(self) -> List[Segment]:
        return self._segments

    @property
    def turns(self) -> int:
        """Turns of the model so far."""
        return sum(1 for s in self._segments if s["kind"] == "generated")

    def add_generated(self, tokens: Any, logprobs: Any, *, weight_version: int, finish_reason: str) -> "TrajectoryBuilder":
        """One turn of the model: its tokens, their logprobs, the version and why it stopped."""
        ids = _ids(tokens, "generated tokens")
        lps = arrays.logprobs(logprobs)
        if isinstance(lps, arrays.Problem):
            raise DataInputError(error_codes.BAD_APPEND, f"logprobs: {lps.issues[0][1]}", {})
        if len(ids) != len(lps):
            raise DataInputError(error_codes.BAD_APPEND, f"a turn of {len(ids)} tokens with {len(lps)} logprobs", {"tokens": len(ids), "logprobs": len(lps)})
        self._tokens.append(ids)
        self._logprobs.append(lps)
        self._segments.append({"kind": "generated", "length": len(ids), "weightVersion": weight_version, "finishReason": finish_reason})
        return self

    def add_observation(self, tokens: Any, *, tool: str, action_id: str, status: str, latency_ms: float) -> "TrajectoryBuilder":
        """What the environment returned for an action, tokenized: masked out of the loss."""
        ids = _ids(tokens, "observation tokens")
        self._tokens.append(ids)
        self._logprobs.append(np.zeros(len(ids), dtype=np.float32))
        self._segments.append(
            {"kind": "observation", "length": len(ids), "action": {"tool": tool, "actionId": action_id, "status": status, "latencyMs": latency_ms}}
        )
        return self

    def build(
        self,
        *,
        id: str,
        prompt_id: str,
        group_id: str,
        sample_index: int,
        group_size: int,
        reward: float,
        weight_version: Optional[int] = None,
        **optional: Any,
    ) -> Trajectory:
        """The writer's input for the trajectory so far. ``weight_version`` defaults to the
        oldest generated turn's (what its staleness is measured from); ``optional`` takes the
        other `Trajectory` fields (rollout_id, priority, info, created_at, completed_at)."""
        if weight_version is None:
            versions = [s["weightVersion"] for s in self._segments if s["kind"] == "generated"]
            if not versions:
                raise DataInputError(error_codes.BAD_SEGMENTS, "a trajectory with no generated turn needs its weight_version given", {"id": id})
            weight_version = min(versions)
        return Trajectory(
            id=id,
            prompt_id=prompt_id,
            group_id=group_id,
            sample_index=sample_index,
            group_size=group_size,
            weight_version=weight_version,
            reward=reward,
            tokens=self.tokens,
            logprobs=np.concatenate(self._logprobs),
            prompt_length=self.prompt_length,
            response_length=self.response_length,
            segments=[dict(s, action=dict(s["action"])) if s["kind"] == "observation" else dict(s) for s in self._segments],
            **optional,
        )
