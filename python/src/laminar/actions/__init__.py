"""Actions: tool calls of agentic trajectories, executed by shared worker pools over NATS
JetStream (docs/components/actions.md). The worker SDK and a client, wire-compatible with the TypeScript
ActionClient and ActionWorker (src/actions):

    from laminar.actions import ActionWorker, ActionArgumentError

    def add(args, ctx):                      # sync handlers run in a thread
        if not isinstance(args.get("a"), int):
            raise ActionArgumentError("add: a must be an integer")   # status bad_call
        return str(args["a"] + args["b"])

    worker = await ActionWorker.start(nc, kind="calc", tools={"add": add}, concurrency=4)

Handlers may run more than once for one action (at-least-once): make them idempotent by the
action id (``ctx.action_id``), see "What a tool author must do" in the docs.
"""

from .client import ActionClient
from .errors import ActionArgumentError
from .lookup import LOOKUP_TOOL, fnv1a32, lookup_digits, lookup_handler
from .wire import action_names, cap_output, decode_result, encode_action, truncation_marker
from .worker import ActionContext, ActionWorker

__all__ = [
    "ActionArgumentError",
    "ActionClient",
    "ActionContext",
    "ActionWorker",
    "LOOKUP_TOOL",
    "action_names",
    "cap_output",
    "decode_result",
    "encode_action",
    "fnv1a32",
    "lookup_digits",
    "lookup_handler",
    "truncation_marker",
]
