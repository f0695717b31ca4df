"""ActionWorker: a Python process's share of a kind's worker pool, as src/actions/worker.ts (read
its comment and docs/components/actions.md): one pull per free slot, heartbeats (in-progress
acks) while an action runs, the action's timeout, the output cap, the last delivery reported as
failed, the result published before the ack.

    async def search(args, ctx):             # async handler
        return await my_index.query(args["q"])

    def python_eval(args, ctx):              # sync handler: runs in a thread
        return str(eval(args["expr"], {}))

    worker = await ActionWorker.start(nc, kind="search", tools={"search": search}, concurrency=8)
    ...
    await worker.stop()
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, Optional, Union

from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from .. import error_codes
from ..errors import LaminarError
from .errors import ActionArgumentError
from .wire import ActionNames, action_names, cap_output, check_name, decode_action, encode_result

Handler = Callable[[Any, "ActionContext"], Union[str, Awaitable[str]]]

DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024
DEFAULT_ACK_WAIT_S = 10.0
DEFAULT_MAX_DELIVERIES = 3
DEFAULT_CAPACITY = 10_000
PRESENCE_HEARTBEAT_S = 2.0


@dataclass
class ActionContext:
    action_id: str
    trajectory_id: str
    job_id: str
    kind: str
    tool: str
    #: 1 for the first delivery; more after a worker died or hung with this action.
    delivery: int
    timeout_s: float


async def _ensure_streams(js: Any, names: ActionNames) -> None:
    """The pool's streams, as streams.ts creates them, when missing."""
    for config in (
        StreamConfig(
            name=names.stream,
            subjects=[f"laminar.act.{names.pool}.q.*"],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            duplicate_window=600.0,
        ),
        StreamConfig(
            name=names.result_stream,
            subjects=[f"laminar.act.{names.pool}.r.>"],
            storage=StorageType.MEMORY,
            max_age=1800.0,
            duplicate_window=600.0,
            max_msgs_per_subject=1,
            allow_direct=True,
        ),
    ):
        try:
            await js.stream_info(config.name)
        except NotFoundError:
            await js.add_stream(config)


async def _ensure(js: Any, names: ActionNames, kind: str) -> None:
    """The pool's streams and the kind's consumer, as streams.ts creates them, when missing."""
    await _ensure_streams(js, names)
    try:
        await js.consumer_info(names.stream, names.consumer(kind))
    except NotFoundError:
        await js.add_consumer(
            names.stream,
            ConsumerConfig(
                durable_name=names.consumer(kind),
                filter_subject=names.queue_subject(kind),
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                max_ack_pending=DEFAULT_CAPACITY,
                ack_wait=DEFAULT_ACK_WAIT_S,
                max_deliver=DEFAULT_MAX_DELIVERIES + 1,
                max_waiting=4096,
            ),
        )


class ActionWorker:
    def __init__(self, nc: NATS, names: ActionNames, kind: str, tools: Dict[str, Handler], concurrency: int, max_output_bytes: int, worker_id: str) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self.names = names
        self.kind = kind
        self.tools = tools
        self.concurrency = concurrency
        self.max_output_bytes = max_output_bytes
        self.id = worker_id
        self.busy = 0
        self.done = 0
        self._ack_wait_s = DEFAULT_ACK_WAIT_S
        self._max_deliveries = DEFAULT_MAX_DELIVERIES
        self._leaving = False
        self._tasks: list[asyncio.Task] = []
        self._kv: Any = None

    @classmethod
    async def start(
        cls,
        nc: NATS,
        kind: str,
        tools: Dict[str, Handler],
        concurrency: int = 1,
        pool: str = "default",
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        worker_id: Optional[str] = None,
    ) -> "ActionWorker":
        check_name("an action kind", kind)
        if not tools:
            raise LaminarError(error_codes.BAD_ACTION, "an action worker needs at least one tool")
        if not isinstance(concurrency, int) or not 1 <= concurrency <= 4096:
            raise LaminarError(error_codes.BAD_ACTION, f"concurrency must be an integer in 1..4096, got {concurrency!r}")
        names = action_names(pool)
        w = cls(nc, names, kind, tools, concurrency, max_output_bytes, worker_id or f"{socket.gethostname()}:{os.getpid()}:py")
        await _ensure(w._js, names, kind)
        info = await w._js.consumer_info(names.stream, names.consumer(kind))
        w._ack_wait_s = float(info.config.ack_wait or DEFAULT_ACK_WAIT_S)
        w._max_deliveries = max(1, int(info.config.max_deliver or 2) - 1)
        w._sub = await w._js.pull_subscribe_bind(durable=names.consumer(kind), stream=names.stream)
        try:
            w._kv = await w._js.key_value(names.workers_bucket)
        except Exception:  # noqa: BLE001 - missing: create it as worker-presence.ts does
            w._kv = await w._js.create_key_value(bucket=names.workers_bucket, history=1, ttl=3 * PRESENCE_HEARTBEAT_S)
        w._tasks = [asyncio.create_task(w._slot()) for _ in range(concurrency)]
        w._tasks.append(asyncio.create_task(w._presence()))
        return w

    def status(self) -> Dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "executor": "python", "slots": self.concurrency, "busy": self.busy, "done": self.done}

    async def _presence(self) -> None:
        key = _b64(self.id)
        while not self._leaving:
            try:
                await self._kv.put(key, json.dumps({**self.status(), "seen": int(time.time() * 1000)}).encode())
            except Exception:  # noqa: BLE001 - a missed heartbeat only
                pass
            await asyncio.sleep(PRESENCE_HEARTBEAT_S)

    async def _slot(self) -> None:
        import nats.errors

        while not self._leaving:
            try:
                msgs = await self._sub.fetch(batch=1, timeout=2)
            except nats.errors.TimeoutError:
                continue
            except Exception:  # noqa: BLE001 - connection trouble: try again shortly
                if self._leaving:
                    return
                await asyncio.sleep(0.25)
                continue
            for msg in msgs:
                if self._leaving:
                    await msg.nak()
                    continue
                self.busy += 1
                try:
                    await self._handle(msg)
                finally:
                    self.busy -= 1
                    self.done += 1

    async def _handle(self, msg: Any) -> None:
        try:
            action = decode_action(msg.data)
        except LaminarError:
            await msg.term()
            return
        delivery = int(msg.metadata.num_delivered)
        started_wall = time.time() * 1000
        t0 = time.monotonic()
        ran = delivery <= self._max_deliveries
        if not ran:
            status, output, code = (
                "failed",
                f"the action was handed to workers {self._max_deliveries} time(s) and none returned a result (each died or hung)",
                error_codes.ACTION_MAX_DELIVERIES,
            )
        else:
            status, output, code = await self._execute(action, msg, delivery)
        exec_ms = (time.monotonic() - t0) * 1000 if ran else 0.0
        output, truncated = cap_output(output, self.max_output_bytes)
        if truncated and status == "ok":
            status = "truncated"
        body = {
            "id": action["id"],
            "traj": action["traj"],
            "kind": action["kind"],
            "tool": action["tool"],
            "status": status,
            "output": output,
            "truncated": truncated,
            "queueMs": max(0.0, started_wall - action["at"]) if ran else 0.0,
            "execMs": exec_ms,
            "deliveries": delivery,
            "worker": self.id,
            "at": time.time() * 1000,
        }
        if code is not None:
            body["code"] = code
        try:
            await self._js.publish(action["reply"], encode_result(**body), headers={"Nats-Msg-Id": action["id"]})
        except Exception:  # noqa: BLE001 - not acked: delivered again after the ack wait
            return
        await msg.ack()

    async def _execute(self, action: Dict[str, Any], msg: Any, delivery: int) -> "tuple[str, str, Optional[str]]":
        handler = self.tools.get(action["tool"])
        if handler is None:
            return "bad_call", f"unknown tool {action['tool']!r} for kind {self.kind} (tools: {', '.join(self.tools)})", error_codes.ACTION_UNKNOWN_TOOL
        timeout_s = action["timeoutMs"] / 1000
        ctx = ActionContext(action["id"], action["traj"], action["job"], self.kind, action["tool"], delivery, timeout_s)

        async def beat() -> None:
            while True:
                await asyncio.sleep(max(0.05, self._ack_wait_s / 3))
                await msg.in_progress()

        heartbeat = asyncio.create_task(beat())
        try:
            if inspect.iscoroutinefunction(handler):
                out = await asyncio.wait_for(handler(action.get("args"), ctx), timeout_s)
            else:
                # A sync handler runs in a thread; past the timeout it is abandoned (threads cannot be killed).
                out = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(None, handler, action.get("args"), ctx), timeout_s)
            if not isinstance(out, str):
                return "error", f"{action['tool']} returned {type(out).__name__}, not text", error_codes.ACTION_HANDLER_FAILED
            return "ok", out, None
        except asyncio.TimeoutError:
            return "timeout", f"the tool ran past the action's timeout of {action['timeoutMs']} ms", error_codes.ACTION_TIMEOUT
        except ActionArgumentError as err:
            return "bad_call", err.message, err.code
        except Exception as err:  # noqa: BLE001 - the handler's failure is the result
            return "error", str(err), error_codes.ACTION_HANDLER_FAILED
        finally:
            heartbeat.cancel()

    async def stop(self) -> None:
        """Stops taking actions; the slots finish what they run."""
        self._leaving = True
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            await self._kv.delete(_b64(self.id))
        except Exception:  # noqa: BLE001
            pass


def _b64(text: str) -> str:
    import base64

    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")
