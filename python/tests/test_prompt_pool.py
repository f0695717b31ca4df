"""The Python PromptPool against a real redis-server, and with the TypeScript PromptPool on the same
pool (prompt_pool_node.mjs over dist/): what one language loads the other claims, a completion
counts once whichever language sends it, returned samples cross over, and both run the very same
Lua scripts (scripts.py is generated from src/data/prompts/scripts.ts)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from laminar import error_codes
from laminar.data import StoreError
from laminar.data.prompts import DataNotFoundError, OwnershipError, PromptClaim, PromptPool

REPO = Path(__file__).resolve().parents[2]
NODE_SCRIPT = Path(__file__).with_name("prompt_pool_node.mjs")
DIST_DATA = REPO / "dist" / "src" / "data" / "index.js"


@pytest.fixture(scope="module")
def socket_path(redis_socket: str) -> str:
    """One redis-server for the module (conftest.py's ``redis_socket``)."""
    return redis_socket


@pytest.fixture
def client(socket_path: str) -> Iterator[redis.Redis]:
    c = redis.Redis(unix_socket_path=socket_path)
    yield c
    c.close()


_names = iter(range(1_000_000))


@pytest.fixture
def name() -> str:
    return f"py{next(_names)}"


def ts(socket_path: str, pool: str, command: str, *args: str, stdin: Any = None) -> Any:
    """The TypeScript PromptPool's answer to one command."""
    assert DIST_DATA.exists(), f"{DIST_DATA} is missing: build with `npx tsc -p tsconfig.json`"
    proc = subprocess.run(
        ["node", str(NODE_SCRIPT), socket_path, pool, command, *args],
        input=None if stdin is None else json.dumps(stdin),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 0, f"prompt_pool_node.mjs {command} failed:\n{proc.stderr}"
    return json.loads(proc.stdout)


def ts_claim_json(c: PromptClaim) -> Dict[str, Any]:
    """A Python claim as the TypeScript side holds one."""
    out: Dict[str, Any] = {"id": c.id, "payload": c.payload, "n": c.n, "token": c.token, "epoch": c.epoch, "groupId": c.group_id, "deadline": c.deadline}
    if c.returned:
        out.update(samples=c.samples, returned=True)
    return out


def py_claim(c: Dict[str, Any]) -> PromptClaim:
    return PromptClaim(c["id"], c["payload"], c["n"], c["token"], c["epoch"], c["groupId"], c["deadline"], c.get("samples"), c.get("returned", False))


def camel(progress: Any) -> Dict[str, Any]:
    def one(k: str) -> str:
        head, *rest = k.split("_")
        return head + "".join(w.title() for w in rest)

    return {one(k): v for k, v in dataclasses.asdict(progress).items()}


def write_jsonl(tmp_path: Path, lines: List[str]) -> str:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(f"{line}\n" for line in lines))
    return str(path)


MIXED = [
    json.dumps({"id": "q1", "payload": {"text": "é one"}}),
    json.dumps({"id": 2, "payload": [1, 2], "n": 4}),
    "not json",
    json.dumps({"id": "q3"}),
    json.dumps({"id": " q4", "payload": 1}),
    json.dumps({"id": "q5", "payload": None, "n": 0}),
    json.dumps({"id": "q1", "payload": "again"}),
    json.dumps({"id": "q6", "payload": {"a": 1.5, "b": True}}),
]


def test_the_scripts_are_those_of_typescript() -> None:
    proc = subprocess.run(["node", str(REPO / "scripts" / "prompt-pool-scripts.mjs"), "--check"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr


def test_python_loads_and_typescript_claims_and_completion_counts_once(socket_path: str, client: redis.Redis, name: str, tmp_path: Path) -> None:
    pool = PromptPool.open(client, name, default_group_size=2)
    report = pool.load_jsonl(write_jsonl(tmp_path, MIXED))
    assert (report.loaded, report.duplicates) == (3, 1)
    # The same lines and codes as the TypeScript loader reports for the same file.
    ts_report = ts(socket_path, f"{name}ts", "load", write_jsonl(tmp_path, MIXED))
    assert [(r.line, r.code) for r in report.rejected] == [(r["line"], r["code"]) for r in ts_report["rejected"]]
    assert [(r.line, r.code) for r in report.rejected] == [
        (3, error_codes.BAD_PROMPT),
        (4, error_codes.BAD_PROMPT),
        (5, error_codes.BAD_PROMPT),
        (6, error_codes.BAD_PROMPT),
        (7, error_codes.DUPLICATE_PROMPT),
    ]
    assert report.rejected[0].message.startswith("line 3: not JSON")

    claims = ts(socket_path, name, "claim", "r-ts", "10")
    assert [(c["id"], c["payload"], c["n"], c["groupId"]) for c in claims] == [
        ("q1", {"text": "é one"}, 2, "q1#0"),
        ("2", [1, 2], 4, "2#0"),
        ("q6", {"a": 1.5, "b": True}, 2, "q6#0"),
    ]
    # Python completes what TypeScript claimed; TypeScript's retry is a duplicate, and vice versa.
    assert pool.complete(py_claim(claims[0])) == "ok"
    assert ts(socket_path, name, "complete", stdin=claims[0]) == "duplicate"
    assert ts(socket_path, name, "complete", stdin=claims[1]) == "ok"
    assert pool.complete(py_claim(claims[1])) == "duplicate"
    assert camel(pool.progress()) == ts(socket_path, name, "progress")
    assert pool.progress().completions == 2


def test_typescript_loads_and_python_claims(socket_path: str, client: redis.Redis, name: str, tmp_path: Path) -> None:
    lines = [json.dumps({"id": f"p{i}", "payload": {"i": i}, **({"n": 3} if i % 2 else {})}) for i in range(6)]
    assert ts(socket_path, name, "load", write_jsonl(tmp_path, lines))["loaded"] == 6
    pool = PromptPool(client, name)
    claims = pool.claim("r-py", 4)
    assert [(c.id, c.payload, c.n, c.group_id, c.epoch) for c in claims] == [(f"p{i}", {"i": i}, 3 if i % 2 else 2, f"p{i}#0", 0) for i in range(4)]
    assert all(c.deadline > time.time() * 1000 for c in claims)
    assert ts(socket_path, name, "complete", stdin=ts_claim_json(claims[0])) == "ok"
    assert pool.complete(claims[0]) == "duplicate"
    # A claim given back in Python is fenced for TypeScript too.
    pool.give_back(claims[1])
    assert ts(socket_path, name, "complete", stdin=ts_claim_json(claims[1])) == {"code": error_codes.LEASE_LOST}
    # The given-back prompt is served first again, to TypeScript.
    assert [c["id"] for c in ts(socket_path, name, "claim", "r-ts", "1")] == ["p1"]
    assert pool.give_back_rollout("r-py") == 2
    assert [c.id for c in pool.claim("r-py2", 10)] == ["p3", "p2", "p4", "p5"]


def test_returned_samples_cross_over(socket_path: str, client: redis.Redis, name: str, tmp_path: Path) -> None:
    pool = PromptPool.open(client, name, default_group_size=4)
    pool.load([{"id": "g", "payload": "x"}, {"id": "h", "payload": "y"}])
    [first] = pool.claim("r1", 1)
    assert pool.complete(first) == "ok"
    # Python returns samples; TypeScript claims them before the fresh prompt, same group id.
    pool.return_samples("g#0", [3, 1])
    [back, fresh] = ts(socket_path, name, "claim", "r-ts", "2")
    assert back["returned"] is True and (back["groupId"], back["samples"], back["epoch"]) == ("g#0", [1, 3], 0)
    assert fresh["id"] == "h" and "returned" not in fresh
    assert pool.complete(py_claim(back)) == "ok"
    assert ts(socket_path, name, "complete", stdin=back) == "duplicate"
    # TypeScript returns; Python claims.
    ts(socket_path, name, "return", "g#0", "0")
    [again] = pool.claim("r2", 1)
    assert (again.returned, again.group_id, again.samples, again.id, again.payload) == (True, "g#0", [0], "g", "x")
    assert pool.extend(again, 1_200_000) > again.deadline
    pool.give_back(again)
    with pytest.raises(OwnershipError) as lost:
        pool.complete(again)
    assert lost.value.code == error_codes.LEASE_LOST
    progress = pool.progress()
    assert (progress.returned_entries, progress.returned_samples, progress.returned_completions, progress.returned_given_back) == (2, 3, 1, 1)
    for bad, code in [("g#1", error_codes.UNKNOWN_GROUP), ("g#00", error_codes.UNKNOWN_GROUP), ("nope#0", error_codes.UNKNOWN_GROUP)]:
        with pytest.raises(Exception) as err:
            pool.return_samples(bad, [0])
        assert err.value.code == code  # type: ignore[attr-defined]
    with pytest.raises(Exception) as err:
        pool.return_samples("g#0", [4])
    assert err.value.code == error_codes.GROUP_MISMATCH  # type: ignore[attr-defined]
    assert pool.group_size("g#0") == 4 and pool.group_size("g#1") is None
    # A key makes the call idempotent, in both languages: one entry for the same key.
    assert pool.return_samples("h#0", [2], key="h#0/2@9") == "ok"
    assert pool.return_samples("h#0", [2], key="h#0/2@9") == "duplicate"
    assert ts(socket_path, name, "return", "h#0", "2", "h#0/2@9") == "duplicate"
    assert pool.progress().returned_entries == 3


def test_each_prompt_goes_to_one_claimer_and_epochs_roll_over(client: redis.Redis, socket_path: str, name: str) -> None:
    pool = PromptPool.open(client, name, epochs=2)
    pool.load({"id": f"q{i}", "payload": i} for i in range(60))
    got: List[List[PromptClaim]] = [[] for _ in range(4)]

    def claimer(k: int) -> None:
        own = PromptPool(redis.Redis(unix_socket_path=socket_path), name)
        while batch := own.claim(f"r{k}", 7):
            got[k].extend(batch)

    threads = [threading.Thread(target=claimer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [c.id for batch in got for c in batch]
    assert sorted(ids) == sorted(f"q{i}" for i in range(60))
    for c in (c for batch in got for c in batch):
        assert pool.complete(c) == "ok"
    second = pool.claim("r", 100)
    assert len(second) == 60 and {c.epoch for c in second} == {1} and second[0].group_id.endswith("#1")
    for c in second:
        pool.complete(c)
    assert pool.claim("r", 1) == [] and pool.progress().finished


def test_unknown_claims_and_a_dead_server_are_typed_errors(client: redis.Redis, name: str) -> None:
    pool = PromptPool.open(client, name)
    with pytest.raises(DataNotFoundError) as unknown:
        pool.complete(PromptClaim("never", None, 1, "1", 0, "never#0", 0))
    assert unknown.value.code == error_codes.UNKNOWN_CLAIM
    with pytest.raises(Exception) as bad_name:
        PromptPool(client, "no spaces")
    assert bad_name.value.code == error_codes.BAD_DATA_OPTIONS  # type: ignore[attr-defined]
    # No retries of the client's own (redis-py's default: three, 3.6 s of backoff): what is
    # tested is how the pool reports the failure, not how long redis-py tries.
    dead = PromptPool(redis.Redis(unix_socket_path="/nonexistent/redis.sock", retry=Retry(NoBackoff(), 0)), name)
    with pytest.raises(StoreError) as store:
        dead.claim("r")
    assert store.value.code == error_codes.STORE and isinstance(store.value.__cause__, redis.ConnectionError)
    pool.destroy()
    assert client.keys(f"laminar:pp:{{{name}}}:*") == []
