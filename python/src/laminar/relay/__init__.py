"""The Python client of the relay's local protocol (version 1): ``RelayClient``, its ``Lease``s
(versions mapped read-only, as zero-copy numpy or torch views) and ``Publication``s (versions
written in place). docs/components/python-relay.md describes it; docs/reference/protocols.md the
protocol.
"""

from .client import RelayClient, specs_of
from .dtypes import DTYPE_SIZES
from .lease import Lease
from .lora import adapter_config_text, lora_base_of, lora_request, version_kind
from .protocol import DEFAULT_SHM_DIR, PROTOCOL_VERSION, TensorInfo, VersionEvent, default_socket_path
from .publication import Publication
from .publish_result import PublishResult
from .watch import AsyncWatch, Watch

__all__ = [
    "RelayClient",
    "Lease",
    "Publication",
    "PublishResult",
    "TensorInfo",
    "VersionEvent",
    "Watch",
    "AsyncWatch",
    "specs_of",
    "lora_request",
    "adapter_config_text",
    "version_kind",
    "lora_base_of",
    "DTYPE_SIZES",
    "PROTOCOL_VERSION",
    "DEFAULT_SHM_DIR",
    "default_socket_path",
]
