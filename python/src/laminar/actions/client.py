"""ActionClient: submits actions and waits for their results, as src/actions/client.ts (the same
rules: a result is matched by action id and must name the submission's trajectory; a second
result of an action is dropped; the idempotency key is the action id and the message id).

    client = await ActionClient.open(nc)
    result = await client.submit(kind="lookup", tool="lookup", args={"key": "k"},
                                 idempotency_key="traj-7/turn-1", trajectory_id="traj-7", timeout_ms=10_000)
    result["status"], result["output"]

It is the simple client: no per-job quotas, and a resubmission of a key the stream has already seen
(a trajectory resumed from another client) gets its result only if it is published after this
submission (the TypeScript client also finds a result stored before).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any, Dict, Optional

from .. import error_codes
from ..errors import LaminarError
from .wire import ActionNames, action_names, check_name, decode_result, encode_action
from .worker import _ensure_streams


class ActionClient:
    def __init__(self, nc: Any, names: ActionNames, job: str) -> None:
        self._nc = nc
        self._js = nc.jetstream()
        self.names = names
        self.job = job
        self.id = "c" + secrets.token_urlsafe(9).replace("-", "_")
        self._pending: Dict[str, "tuple[str, asyncio.Future]"] = {}
        self.dropped = {"duplicate": 0, "foreign": 0, "malformed": 0}
        self._sub: Any = None

    @classmethod
    async def open(cls, nc: Any, pool: str = "default", job: str = "default") -> "ActionClient":
        names = action_names(pool)
        await _ensure_streams(nc.jetstream(), names)
        client = cls(nc, names, check_name("a job id", job))
        client._sub = await nc.subscribe(names.client_results(client.id), cb=client._on_result)
        await nc.flush()
        return client

    async def _on_result(self, msg: Any) -> None:
        try:
            r = decode_result(msg.data)
        except LaminarError:
            self.dropped["malformed"] += 1
            return
        entry = self._pending.get(r["id"])
        if entry is None:
            self.dropped["duplicate"] += 1
            return
        trajectory_id, future = entry
        if r["traj"] != trajectory_id:
            self.dropped["foreign"] += 1
            return
        del self._pending[r["id"]]
        if not future.done():
            future.set_result(r)

    async def submit(
        self, *, kind: str, tool: str, args: Any, idempotency_key: str, trajectory_id: str, timeout_ms: float, job_id: Optional[str] = None
    ) -> Dict[str, Any]:
        """The result map (``status``, ``output``, ``truncated``, ``queueMs``, ``execMs``, ``deliveries``, ``worker``, ``code``)."""
        check_name("an action kind", kind)
        if not isinstance(tool, str) or not tool:
            raise LaminarError(error_codes.BAD_ACTION, "tool must be a non-empty name")
        if not isinstance(idempotency_key, str) or not idempotency_key or idempotency_key != idempotency_key.strip() or len(idempotency_key.encode()) > 256:
            raise LaminarError(error_codes.BAD_ACTION, "idempotency_key must be 1-256 bytes without edge whitespace")
        if not timeout_ms or timeout_ms <= 0:
            raise LaminarError(error_codes.BAD_ACTION, f"timeout_ms must be positive, got {timeout_ms!r}")
        if idempotency_key in self._pending:
            return await asyncio.shield(self._pending[idempotency_key][1])
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[idempotency_key] = (trajectory_id, future)
        body = encode_action(
            id=idempotency_key,
            kind=kind,
            tool=tool,
            args=args,
            traj=trajectory_id,
            job=job_id or self.job,
            timeoutMs=timeout_ms,
            at=time.time() * 1000,
            reply=self.names.result_subject(self.id, idempotency_key),
        )
        try:
            await self._js.publish(self.names.queue_subject(kind), body, headers={"Nats-Msg-Id": idempotency_key})
        except BaseException:
            self._pending.pop(idempotency_key, None)
            raise
        return await future

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
        for action_id, (_, future) in list(self._pending.items()):
            if not future.done():
                future.set_result({"id": action_id, "status": "failed", "output": "the action client closed", "truncated": False, "code": error_codes.CLOSED})
        self._pending.clear()
