"""Helpers of the experience-buffer tests: the TypeScript side (experience_node.mjs, run from
dist/), the shared vectors (test/vectors/trajectories.json), and trajectories to write."""

from __future__ import annotations

import base64
import json
import math
import subprocess
from pathlib import Path
from typing import Any, Dict

import numpy as np

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "test" / "vectors" / "trajectories.json"
NODE_SCRIPT = Path(__file__).resolve().parent / "experience_node.mjs"
DIST_DATA = REPO / "dist" / "src" / "data" / "index.js"


def node(command: str, *args: str, stdin: Any = None, timeout: float = 120) -> Any:
    """Runs experience_node.mjs and returns its JSON answer (the TypeScript writer, sampler, encoder)."""
    assert DIST_DATA.exists(), f"{DIST_DATA} is missing: build with `npx tsc -p tsconfig.json` (or scripts/bootstrap.sh)"
    proc = subprocess.run(
        ["node", str(NODE_SCRIPT), command, *args],
        input=None if stdin is None else json.dumps(stdin),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    if proc.returncode != 0:
        raise AssertionError(f"experience_node.mjs {command} failed ({proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout)


def _revive(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$number"}:
            return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[value["$number"]]
        return {k: _revive(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_revive(v) for v in value]
    return value


def load_vectors() -> Dict[str, Any]:
    """The shared vectors, with the numbers JSON cannot hold revived (NaN, ±Infinity)."""
    return _revive(json.loads(VECTORS.read_text()))


def trajectory_input(seed: int, tokens: int = 16, **over: Any) -> Dict[str, Any]:
    """A valid writer input (record names, plain lists), different for every seed."""
    n = tokens
    t: Dict[str, Any] = {
        "id": f"traj-{seed}",
        "promptId": f"p{seed // 4}",
        "groupId": f"g{seed // 4}",
        "sampleIndex": seed % 4,
        "groupSize": 4,
        "weightVersion": 2,
        "reward": seed / 4,
        "tokens": [(seed * 7919 + k) % 150_000 for k in range(n)],
        "logprobs": [float(np.float32(-(seed + k / 1000))) for k in range(n)],
        "promptLength": min(4, n),
        "responseLength": n - min(4, n),
        "createdAt": 1_700_000_000_000 + seed,
        "completedAt": 1_700_000_000_500 + seed,
        "rolloutId": f"rollout-{seed % 3}",
        "info": {"seed": seed, "ok": seed % 2 == 0},
    }
    t.update(over)
    return t


def assert_stored_equals(stored: Any, written: Dict[str, Any]) -> None:
    """A trajectory read back (Python `Trajectory`) holds what was written (a record-named input)."""
    assert stored.id == written["id"]
    assert stored.prompt_id == written["promptId"]
    assert stored.group_id == written["groupId"]
    assert stored.sample_index == written["sampleIndex"]
    assert stored.group_size == written["groupSize"]
    assert stored.weight_version == written["weightVersion"]
    assert stored.reward == written["reward"]
    assert stored.prompt_length == written["promptLength"]
    assert stored.response_length == written["responseLength"]
    assert stored.created_at == written["createdAt"]
    assert stored.completed_at == written["completedAt"]
    assert stored.rollout_id == written.get("rolloutId")
    assert stored.priority == written.get("priority", 1)
    assert stored.info == written.get("info")
    assert stored.segments == written.get("segments")
    np.testing.assert_array_equal(stored.tokens, np.asarray(written["tokens"], dtype=np.int32))
    np.testing.assert_array_equal(stored.logprobs, np.asarray(written["logprobs"], dtype=np.float32))


def multi_turn_input(seed: int) -> Dict[str, Any]:
    """A valid multi-turn writer input: a 4-token prompt, a tool call, its observation (logprob 0)
    and the answer."""
    t = trajectory_input(seed, tokens=14)
    t["logprobs"][8:11] = [0.0, 0.0, 0.0]
    t["segments"] = [
        {"kind": "generated", "length": 4, "weightVersion": 2, "finishReason": "tool_call"},
        {"kind": "observation", "length": 3, "action": {"tool": "lookup", "actionId": f"traj-{seed}/turn-0", "status": "ok", "latencyMs": 12.5}},
        {"kind": "generated", "length": 3, "weightVersion": 2, "finishReason": "stop"},
    ]
    return t


def decode_sampled(item: Dict[str, Any]) -> Dict[str, Any]:
    """An item of experience_node.mjs's `sample`, its payload as numpy arrays."""
    out = dict(item)
    out["tokens"] = np.frombuffer(base64.b64decode(item["tokens"]), dtype="<i4")
    out["logprobs"] = np.frombuffer(base64.b64decode(item["logprobs"]), dtype="<f4")
    return out
