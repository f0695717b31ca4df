"""laminar's Python client.

- `laminar.RelayClient`: weights from (and to) the relay on this host, as zero-copy numpy or
  torch views of its shared memory;
- `laminar.data`: trajectories into the experience buffer (`ExperienceWriter`) and batches from
  the sampler service (`Sampler`).

The logic lives in the TypeScript daemons; this package speaks their protocols.
"""

from . import error_codes
from .errors import ClosedError, LaminarError, LaminarTimeoutError, RelayError
from .relay import Lease, Publication, PublishResult, RelayClient
from . import data

__all__ = ["data", "error_codes", "LaminarError", "RelayError", "ClosedError", "LaminarTimeoutError", "RelayClient", "Lease", "Publication", "PublishResult"]
__version__ = "0.1.0"
