"""laminar as verl's checkpoint engine: ``rollout.checkpoint_engine.backend=laminar``.

Importing this module registers ``LaminarCheckpointEngine`` in verl's ``CheckpointEngineRegistry``
under ``laminar`` when verl is importable (``REGISTERED``; ``VERL_IMPORT_ERROR`` says why not).
verl >= 0.8 imports it on every worker when told to:
``actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=laminar.integrations.verl``.

- ``LaminarCheckpointEngine`` (engine.py): verl's interface (send_weights / receive_weights /
  get_weights, the topology hooks);
- ``StreamPublisher`` (publisher.py): a ``(name, tensor)`` stream published as a version;
- ``StreamReceiver`` (receiver.py): versions leased and held while a rollout loads them;
- ``EngineOptions`` (options.py): ``engine_kwargs.laminar`` and the environment.

docs/components/verl.md describes the configuration and what was tested.
"""

from .engine import BACKEND, REGISTERED, VERL_IMPORT_ERROR, LaminarCheckpointEngine
from .options import DEFAULT_RECEIVE_TIMEOUT_S, MODEL_ENV, EngineOptions
from .publisher import PublishResult, StreamPublisher
from .receiver import StreamReceiver

__all__ = [
    "BACKEND",
    "REGISTERED",
    "VERL_IMPORT_ERROR",
    "LaminarCheckpointEngine",
    "EngineOptions",
    "MODEL_ENV",
    "DEFAULT_RECEIVE_TIMEOUT_S",
    "PublishResult",
    "StreamPublisher",
    "StreamReceiver",
]
