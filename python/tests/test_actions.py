"""laminar.actions: the Python worker SDK on a real nats-server, sync and async handlers, typed
results for bad calls, timeouts and the output cap; the lookup tool against the TypeScript one."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid

import nats
import pytest

from laminar import error_codes
from laminar.errors import LaminarError
from laminar.actions import ActionArgumentError, ActionClient, ActionWorker, action_names, decode_result, encode_action, lookup_digits, lookup_handler

from experience_support import REPO as REPO_ROOT


async def submit(nc, pool: str, kind: str, tool: str, args, timeout_ms: int = 5000) -> dict:
    """What ActionClient.submit sends, and the result the worker answers with."""
    names = action_names(pool)
    action_id = uuid.uuid4().hex
    client = "cpytest"
    reply = names.result_subject(client, action_id)
    sub = await nc.subscribe(reply)
    body = encode_action(id=action_id, kind=kind, tool=tool, args=args, traj="t1", job="default", timeoutMs=timeout_ms, at=time.time() * 1000, reply=reply)
    await nc.jetstream().publish(names.queue_subject(kind), body, headers={"Nats-Msg-Id": action_id})
    msg = await sub.next_msg(timeout=30)
    await sub.unsubscribe()
    return decode_result(msg.data)


async def test_sync_and_async_handlers_and_typed_results(nats_server) -> None:
    nc = await nats.connect(nats_server.url)

    async def slow(args, ctx):
        await asyncio.sleep(10)
        return "never"

    def echo(args, ctx):
        return f"{args['x']} on delivery {ctx.delivery}"

    def strict(args, ctx):
        raise ActionArgumentError("strict: no arguments please")

    def boom(args, ctx):
        raise RuntimeError("kaboom")

    worker = await ActionWorker.start(
        nc,
        kind="py",
        pool="pyt",
        concurrency=2,
        max_output_bytes=200,
        tools={"echo": echo, "slow": slow, "strict": strict, "boom": boom, "lookup": lookup_handler, "big": lambda a, c: "z" * 1000},
    )
    try:
        r = await submit(nc, "pyt", "py", "echo", {"x": 7})
        assert (r["status"], r["output"], r["deliveries"], r["worker"]) == ("ok", "7 on delivery 1", 1, worker.id)
        r = await submit(nc, "pyt", "py", "slow", {}, timeout_ms=300)
        assert (r["status"], r["code"]) == ("timeout", error_codes.ACTION_TIMEOUT)
        r = await submit(nc, "pyt", "py", "strict", {})
        assert (r["status"], r["code"]) == ("bad_call", error_codes.ACTION_BAD_ARGS)
        r = await submit(nc, "pyt", "py", "lookup", {"key": 5})
        assert (r["status"], r["code"]) == ("bad_call", error_codes.ACTION_BAD_ARGS)
        r = await submit(nc, "pyt", "py", "nope", {})
        assert (r["status"], r["code"]) == ("bad_call", error_codes.ACTION_UNKNOWN_TOOL)
        r = await submit(nc, "pyt", "py", "boom", {})
        assert (r["status"], r["output"], r["code"]) == ("error", "kaboom", error_codes.ACTION_HANDLER_FAILED)
        r = await submit(nc, "pyt", "py", "big", {})
        assert r["status"] == "truncated" and r["truncated"] and len(r["output"].encode()) <= 200
        assert r["output"].endswith("bytes truncated]")
        r = await submit(nc, "pyt", "py", "lookup", {"key": "apple", "length": 6})
        assert r["output"] == lookup_digits("apple", 6)
    finally:
        await worker.stop()
        await nc.close()


def test_lookup_matches_the_typescript_tool() -> None:
    keys = ["apple", "k-42", "", "ключ", "0000"]
    script = f"import('./dist/src/actions/index.js').then(m => console.log(JSON.stringify({json.dumps(keys)}.map(k => m.lookupDigits(k, 8)))))"
    out = subprocess.run(["node", "-e", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [lookup_digits(k, 8) for k in keys]
    # Fixed vectors: the rule must not drift on either side.
    assert lookup_digits("apple", 6) == "098743"


@pytest.mark.parametrize("args", [None, "key", {"key": "x", "length": 0}, {"key": "x", "length": True}])
def test_lookup_refuses_bad_arguments(args) -> None:
    with pytest.raises(ActionArgumentError):
        lookup_handler(args)


async def test_python_client_against_a_typescript_worker_process(nats_server) -> None:
    """The wire both ways: laminar.actions.ActionClient submits, `laminar action-worker` (TypeScript) runs."""
    worker = subprocess.Popen(
        [
            "node",
            str(REPO_ROOT / "dist" / "src" / "cli" / "laminar.js"),
            "action-worker",
            "--nats",
            nats_server.url,
            "--pool",
            "cross",
            "--kind",
            "lookup",
            "--executor",
            "lookup",
            "--metrics-port",
            "-1",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in worker.stderr:  # type: ignore[union-attr]
            if '"action worker ready"' in line:
                break
        else:
            raise AssertionError(f"the worker exited ({worker.wait()}) before it was ready")
        nc = await nats.connect(nats_server.url)
        client = await ActionClient.open(nc, pool="cross")
        try:
            r = await client.submit(kind="lookup", tool="lookup", args={"key": "apple", "length": 6}, idempotency_key="x1", trajectory_id="t1", timeout_ms=5000)
            assert (r["status"], r["output"], r["deliveries"]) == ("ok", "098743", 1)
            r = await client.submit(kind="lookup", tool="lookup", args={"key": 3}, idempotency_key="x2", trajectory_id="t1", timeout_ms=5000)
            assert (r["status"], r["code"]) == ("bad_call", error_codes.ACTION_BAD_ARGS)
            with pytest.raises(LaminarError) as err:
                await client.submit(kind="a.b", tool="lookup", args={}, idempotency_key="x3", trajectory_id="t1", timeout_ms=5000)
            assert err.value.code == error_codes.BAD_ACTION
        finally:
            await client.close()
            await nc.close()
    finally:
        worker.kill()
        worker.wait()
