"""LoRA adapter versions: what ``RelayClient.publish_lora`` sends, and how a version says it is
an adapter. The relay's side is src/relay/lora/ (docs/components/relay.md, "LoRA adapter
versions"); both speak the same wire format, checked by the shared vectors in
test/vectors/lora-adapters.json.

On the wire an adapter is a ``begin`` like any version, whose tensors are PEFT's pairs
(``base_model.model.<module>.lora_A.weight`` [r, in], ``...lora_B.weight`` [out, r]: the keys
``peft.get_peft_model_state_dict`` gives) and which carries ``lora: {baseModel, baseVersion?,
config}``, ``config`` the text of adapter_config.json. The relay checks all three before it
allocates anything and records them in the version's header as the metadata keys below, which a
lease's ``metadata`` shows.
"""

from __future__ import annotations

import enum
import json
from typing import Any, Mapping, Optional, TypedDict, Union

from .. import error_codes
from ..errors import LaminarError

KIND_KEY = "laminar.kind"
LORA_BASE_MODEL_KEY = "laminar.lora.base_model"
LORA_BASE_VERSION_KEY = "laminar.lora.base_version"
LORA_CONFIG_KEY = "laminar.lora.config"

ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
ADAPTER_CONFIG_FILE = "adapter_config.json"

#: An adapter's config: the text of adapter_config.json, a mapping, or an object with ``to_dict()``
#: (PEFT's ``LoraConfig``).
AdapterConfig = Union[str, bytes, Mapping[str, Any], Any]


class LoraBase(TypedDict):
    """The base an adapter applies to: its model id, and the version it was trained against (None: not named)."""

    model: str
    version: Optional[int]


def _jsonable(value: Any) -> Any:
    """PEFT's ``to_dict()`` holds sets (target_modules) and enums (peft_type, task_type)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return sorted(_jsonable(v) for v in value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def adapter_config_text(config: AdapterConfig) -> str:
    """The text of adapter_config.json for ``config``: a str or bytes goes as it is (the relay
    checks it: ``ERR_LORA_BAD_CONFIG``), a mapping or a PEFT ``LoraConfig`` is written as JSON."""
    if isinstance(config, bytes):
        return config.decode("utf-8")
    if isinstance(config, str):
        return config
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        config = to_dict()
    if not isinstance(config, Mapping):
        kind = type(config).__name__
        raise LaminarError(error_codes.LORA_BAD_CONFIG, f"an adapter config is the text of adapter_config.json, a mapping or a PEFT LoraConfig, not a {kind}")
    return json.dumps(_jsonable(config), indent=2) + "\n"


def lora_request(config: AdapterConfig, base_model: str, base_version: Optional[int] = None) -> dict[str, Any]:
    """``begin``'s ``lora`` field: the adapter's base and config."""
    request: dict[str, Any] = {"baseModel": base_model, "config": adapter_config_text(config)}
    if base_version is not None:
        request["baseVersion"] = int(base_version)
    return request


def version_kind(metadata: Mapping[str, str]) -> str:
    """``"lora"`` for an adapter version, ``"full"`` for any other (a lease's ``metadata``)."""
    return "lora" if metadata.get(KIND_KEY) == "lora" else "full"


def lora_base_of(metadata: Mapping[str, str]) -> Optional[LoraBase]:
    """The base of an adapter version, from its metadata; None for a full version."""
    if version_kind(metadata) != "lora":
        return None
    version = metadata.get(LORA_BASE_VERSION_KEY)
    return {"model": metadata.get(LORA_BASE_MODEL_KEY, ""), "version": None if version is None else int(version)}
