"""The laminar backend's options: verl's ``engine_kwargs.laminar`` and the environment.

verl builds every checkpoint engine as
``CheckpointEngineRegistry.new(backend, bucket_size=..., [is_master=...], **engine_kwargs[backend])``,
so what a user writes under ``actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.laminar``
arrives here as keyword arguments. They are checked once, at construction, so that a typo in a
YAML file fails when the worker starts rather than at the first weight sync.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from ... import error_codes
from ...errors import LaminarError

#: The model id when ``model`` is not given (verl workers inherit the Ray job's environment).
MODEL_ENV = "LAMINAR_MODEL"
#: Seconds ``receive_weights`` waits for the version to reach the local relay by default.
DEFAULT_RECEIVE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class EngineOptions:
    """What the backend needs: the model, where its relay is, how long a rollout waits."""

    #: The model id the versions are published under (the relay's ``model``).
    model: str
    #: The relay's unix socket; None: ``$LAMINAR_RELAY_SOCKET``, else relay.sock in ``$LAMINAR_SHM_DIR`` or /dev/shm/laminar.
    socket: Optional[str] = None
    #: Seconds ``receive_weights`` waits for its version to complete at the local relay.
    receive_timeout_s: float = DEFAULT_RECEIVE_TIMEOUT_S
    #: Floating-point tensors are converted to this dtype before publishing (on their device);
    #: None keeps each tensor's dtype (bit for bit).
    rollout_dtype: Any = None
    #: The name the relay shows for this client in its logs.
    client_name: Optional[str] = None
    #: Page-lock each leased version for CUDA while the rollout loads from it
    #: (``Lease.register_cuda``: host-to-device copies at the link's speed). None: when torch sees
    #: a CUDA device, and a refusal only logged; True: a refusal fails the weight sync.
    register_cuda: Optional[bool] = None

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any], environ: Optional[Mapping[str, str]] = None) -> "EngineOptions":
        """Options from verl's ``engine_kwargs`` (and ``$LAMINAR_MODEL``); ``INVALID_ARG`` for an
        unknown key, a missing model or a value out of range."""
        env = os.environ if environ is None else environ
        unknown = sorted(set(kwargs) - _KNOWN)
        if unknown:
            raise LaminarError(
                error_codes.INVALID_ARG,
                f"unknown laminar checkpoint-engine option(s) {unknown}; known: {sorted(_KNOWN)}",
                {"unknown": unknown},
            )
        model = kwargs.get("model") or env.get(MODEL_ENV)
        if not isinstance(model, str) or not model:
            raise LaminarError(
                error_codes.INVALID_ARG,
                f"the laminar checkpoint engine needs a model id: engine_kwargs.laminar.model or ${MODEL_ENV}",
            )
        socket = kwargs.get("socket")
        if socket is not None and (not isinstance(socket, str) or not socket):
            raise LaminarError(error_codes.INVALID_ARG, f"socket must be a path, got {socket!r}")
        timeout = kwargs.get("receive_timeout_s", DEFAULT_RECEIVE_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise LaminarError(error_codes.INVALID_ARG, f"receive_timeout_s must be a positive number of seconds, got {timeout!r}")
        name = kwargs.get("client_name")
        if name is not None and not isinstance(name, str):
            raise LaminarError(error_codes.INVALID_ARG, f"client_name must be a string, got {name!r}")
        register_cuda = kwargs.get("register_cuda")
        if register_cuda is not None and not isinstance(register_cuda, bool):
            raise LaminarError(error_codes.INVALID_ARG, f"register_cuda must be true, false or null (when CUDA is there), got {register_cuda!r}")
        return cls(model, socket, float(timeout), resolve_dtype(kwargs.get("rollout_dtype")), name, register_cuda)


_KNOWN = frozenset({"model", "socket", "receive_timeout_s", "rollout_dtype", "client_name", "register_cuda"})


def resolve_dtype(value: Any) -> Any:
    """A torch floating-point dtype from a torch dtype or its name (``"bfloat16"``,
    ``"torch.float16"``); None stays None. ``INVALID_ARG`` for anything else."""
    if value is None:
        return None
    import torch

    dtype = value
    if isinstance(value, str):
        dtype = getattr(torch, value.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise LaminarError(error_codes.INVALID_ARG, f"rollout_dtype must name a torch floating-point dtype (bfloat16, float16, float32), got {value!r}")
    return dtype
