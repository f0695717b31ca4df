"""The reference engine's LoRA adapters: which are loaded, and which requests use each, as
SGLang's `LoRARegistry` keeps them (python/sglang/srt/lora/lora_registry.py).

- `load` validates the directory against the served model (laminar.testing.lora) and registers
  the adapter under its name; at most `max_loras` are registered (SGLang's
  `--max-loaded-loras`), a name already registered is refused.
- A request names its adapter (`lora_path` of /generate); `acquire` resolves the name and counts
  the request as a user until `release`.
- `unload` unregisters the name at once (new requests for it are refused) and returns only when
  the requests already using it have finished: unloading is **deferred**, never refused, and
  never pulls an adapter from under a running request (SGLang's `wait_for_unload`).

Every method runs on the event loop's thread; reading a directory runs in a worker thread.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Optional

from torch import nn

from ...errors import LaminarError
from ..lora import LoraWeights, read_lora_adapter
from .protocol import InvalidRequest


class AdapterRefused(Exception):
    """A load or unload the engine refuses; the message is the answer's `error_message`."""


@dataclass
class _Entry:
    name: str
    path: str
    weights: LoraWeights
    users: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()


class AdapterRegistry:
    def __init__(self, max_loras: int) -> None:
        self.max_loras = max_loras
        self._loaded: dict[str, _Entry] = {}
        self._by_id: dict[str, _Entry] = {}
        """Every adapter still in use, registered or being unloaded, by lora_id."""
        self._lock = asyncio.Lock()
        """Loads and unloads one at a time, as SGLang's lora_update_lock."""

    @property
    def loaded(self) -> dict[str, str]:
        """Registered adapters: name → directory (SGLang's `loaded_adapters`)."""
        return {name: entry.path for name, entry in self._loaded.items()}

    def _names(self) -> str:
        return repr(list(self._loaded))

    async def load(self, name: str, path: str, model: Optional[nn.Module], run: Callable[..., Awaitable[LoraWeights]]) -> None:
        """Reads `path` (with `run`, the worker thread) against the served `model` and registers it."""
        async with self._lock:
            if model is None:
                raise AdapterRefused("The reference engine has no base weights yet: load them first (/update_weights_from_disk).")
            if name in self._loaded:
                raise AdapterRefused(f"LoRA with name {name} already exists. Loaded LoRAs: {self._names()}")
            if len(self._loaded) >= self.max_loras:
                raise AdapterRefused(
                    f"Cannot load LoRA adapter {name} at path {path}. Maximum number of loaded LoRA adapters is {self.max_loras}. "
                    "Please unload some LoRA adapters before loading new ones."
                )
            try:
                weights = await run(read_lora_adapter, path, model)
            except LaminarError as err:
                raise AdapterRefused(f"Failed to load LoRA adapter {name} from {path}: {err}") from err
            entry = _Entry(name, path, weights)
            self._loaded[name] = entry
            self._by_id[weights.lora_id] = entry

    async def unload(self, name: str) -> None:
        """Unregisters `name` now; returns when no request uses it any more."""
        async with self._lock:
            entry = self._loaded.pop(name, None)
            if entry is None:
                raise AdapterRefused(f"LoRA with name {name} does not exist. Loaded LoRAs: {self._names()}")
            await entry.idle.wait()
            self._by_id.pop(entry.weights.lora_id, None)

    def acquire(self, name: Optional[str]) -> Optional[LoraWeights]:
        """The adapter a request names (None: the base model), counted as in use."""
        if name is None:
            return None
        entry = self._loaded.get(name)
        if entry is None:
            raise InvalidRequest(f"The following requested LoRA adapters are not loaded: {name}\nLoaded adapters: {self._names()}.")
        entry.users += 1
        entry.idle.clear()
        return entry.weights

    def release(self, weights: Optional[LoraWeights]) -> None:
        """A request that used `weights` has finished."""
        if weights is None:
            return
        entry = self._by_id.get(weights.lora_id)
        if entry is None:
            return
        entry.users -= 1
        if entry.users == 0:
            entry.idle.set()

    def users(self, name: str) -> int:
        entry = self._loaded.get(name)
        return 0 if entry is None else entry.users
