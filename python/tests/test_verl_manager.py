"""verl's own ``CheckpointEngineManager`` moving weights from trainer workers to rollout workers
through ``backend=laminar``, on CPU Ray workers: the flow of verl's
``tests/checkpoint_engine/test_correctness_on_gpu.py``, with verl's real classes where they run
without a GPU.

Real: Ray (a local cluster of CPU workers), verl's ``RayResourcePool`` / ``RayWorkerGroup`` /
``Worker`` / ``register`` dispatch, verl's ``CheckpointEngineWorker`` on the rollout side (it
imports ``custom_backend_module`` and builds the engine from ``rollout.checkpoint_engine`` as in a
job), verl's ``RolloutReplica`` and ``CheckpointEngineManager.update_weights`` (abort, topology,
send and receive together, finalize, resume), laminar's relay. Ours, as in verl's test: the
trainer worker (verl's test uses an FSDP ``TrainingWorker`` holding Qwen3-8B on GPUs; here a
``Worker`` that publishes a seeded state dict the way ``TrainingWorker.update_weights`` does) and
the server adapter (verl's test records what it receives; so does this one, instead of a vLLM
server). docs/components/verl.md says what cannot run here and why.

Runs in the real-engine environment (.venv-engines has verl 0.9.1 and ray); test/engines/verl.test.ts
runs it there with ``LAMINAR_REQUIRE_VERL=1``, which makes a missing verl a failure, not a skip.
"""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

torch = pytest.importorskip("torch")

try:
    import ray
    from verl.checkpoint_engine import CheckpointEngineManager, CheckpointEngineRegistry, CheckpointEngineWorker
    from verl.single_controller.base import Worker
    from verl.single_controller.base.decorator import Dispatch, register
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl.utils.import_utils import import_external_libs
    from verl.workers.config import CheckpointEngineConfig, RolloutConfig
    from verl.workers.rollout import RolloutReplica

    VERL_MISSING = None
except ImportError as err:  # .venv has no verl (it needs torch 2 and ray): the engines env runs this
    VERL_MISSING = err

if VERL_MISSING is not None:
    if os.environ.get("LAMINAR_REQUIRE_VERL") == "1":
        raise ImportError(f"verl is required here (LAMINAR_REQUIRE_VERL=1) but cannot be imported: {VERL_MISSING!r}")
    pytest.skip(f"verl is not importable here: {VERL_MISSING!r}", allow_module_level=True)

pytestmark = pytest.mark.timeout(300)

MODEL = "org/verl-manager"
BACKEND = "laminar"
STEPS = (1, 2, 3)


def weights_at(step: int) -> dict[str, "torch.Tensor"]:
    """The trainer's state dict at ``step``: several dtypes and an integer buffer, values that
    differ at every step."""
    g = torch.Generator().manual_seed(step)
    return {
        "model.embed_tokens.weight": torch.randn(96, 16, generator=g).to(torch.bfloat16),
        "model.layers.0.mlp.up_proj.weight": torch.randn(32, 16, generator=g),
        "model.norm.weight": torch.randn(16, generator=g).to(torch.float16),
        "model.positions": torch.arange(11, dtype=torch.int64) * (1_000_003 + step),
    }


# -- the trainer side: what verl's TrainingWorker does, with a state dict instead of FSDP -----


class TrainerWorker(Worker):
    """Builds its engine as verl's ActorRolloutRefWorker does: imports ``custom_backend_module``,
    then ``CheckpointEngineRegistry.new(backend, bucket_size=..., is_master=rank 0, **engine_kwargs)``."""

    def __init__(self, checkpoint_engine_config: "CheckpointEngineConfig") -> None:
        super().__init__()
        import_external_libs(checkpoint_engine_config.custom_backend_module or None)
        backend = checkpoint_engine_config.backend
        engine_kwargs = dict(checkpoint_engine_config.engine_kwargs.get(backend, {}))
        self.checkpoint_engine = CheckpointEngineRegistry.new(
            backend, bucket_size=checkpoint_engine_config.update_weights_bucket_megabytes << 20, is_master=self.rank == 0, **engine_kwargs
        )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    async def update_weights(self, global_steps: int = None, mode: str = "auto"):
        return await self.checkpoint_engine.send_weights(iter(weights_at(global_steps).items()), global_steps=global_steps)

    @register(dispatch_mode=Dispatch.DP_COMPUTE, blocking=False)
    def execute_checkpoint_engine(self, method: str, *args, **kwargs):
        return getattr(self.checkpoint_engine, method)(*args, **kwargs)


# -- the rollout side: verl's CheckpointEngineWorker with a recording server adapter ----------


class RecordingServerAdapter:
    """Stands where vLLM's server adapter does: copies what it is given (the views are valid
    until ``finalize``), as verl's test's MockServerAdapter does."""

    def __init__(self) -> None:
        self.received: dict[int, dict[str, "torch.Tensor"]] = {}

    async def update_weights(self, weights, global_steps=None, **kwargs):
        self.received[global_steps] = {name: tensor.clone() async for name, tensor in weights}


class RolloutWorker(CheckpointEngineWorker):
    def __init__(self, rollout_config: "RolloutConfig") -> None:
        super().__init__(rollout_config, model_config=None, server_adapter=RecordingServerAdapter())

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def received(self, global_steps: int) -> dict[str, "torch.Tensor"]:
        return self.server_adapter.received[global_steps]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def holds_a_lease(self) -> bool:
        return self.checkpoint_engine.lease is not None


class Replica(RolloutReplica):
    """A replica of one worker with no server: what verl's test's MockReplica is (its
    ``init_hybrid`` takes the replica's workers and launches no server)."""

    async def init_hybrid(self, worker_group):
        self.workers = worker_group.workers[self.world_size * self.replica_rank : self.world_size * (self.replica_rank + 1)]

    async def launch_servers(self):
        raise NotImplementedError("no rollout server in this test")

    def get_ray_class_with_init_args(self):
        raise NotImplementedError("no rollout server in this test")


# The worker classes travel to Ray's worker processes by value: this test module is not
# importable there.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def ray_cluster():
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


def _same_bits(got: "torch.Tensor", want: "torch.Tensor") -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and torch.equal(got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8))


def test_checkpoint_engine_manager_moves_every_step_to_every_rollout(relay, ray_cluster):
    engine_config = CheckpointEngineConfig(
        backend=BACKEND,
        custom_backend_module="laminar.integrations.verl",
        engine_kwargs={BACKEND: {"model": MODEL, "socket": relay.socket_path}},
    )
    rollout_config = RolloutConfig(name="vllm", tensor_model_parallel_size=1, checkpoint_engine=engine_config)

    def pool(workers: int) -> "RayResourcePool":
        return RayResourcePool(process_on_nodes=[workers], use_gpu=False, max_colocate_count=1)

    trainer = RayWorkerGroup(pool(1), RayClassWithInitArgs(cls=ray.remote(TrainerWorker), checkpoint_engine_config=engine_config), device_name="cpu")
    rollout = RayWorkerGroup(pool(2), RayClassWithInitArgs(cls=ray.remote(RolloutWorker), rollout_config=rollout_config), device_name="cpu")
    replicas = [Replica(replica_rank=rank, config=rollout_config, model_config=None) for rank in range(2)]

    async def init_replicas() -> None:
        await asyncio.gather(*(replica.init_hybrid(rollout) for replica in replicas))

    asyncio.run(init_replicas())
    assert [len(replica.workers) for replica in replicas] == [1, 1]

    manager = CheckpointEngineManager(config=engine_config, actor_wg=trainer, replicas=replicas)
    assert manager.backend_cls.__module__ == "laminar.integrations.verl.engine"
    for step in STEPS:
        metrics = manager.update_weights(global_steps=step)  # auto_await: runs the coroutine here
        assert metrics["laminar/version"] == step
        want = weights_at(step)
        for got in rollout.received(step):
            assert sorted(got) == sorted(want)
            for name, tensor in want.items():
                assert _same_bits(got[name], tensor), f"step {step}: {name} differs"
        # verl's finalize (step 6 of update_weights) released every rollout's lease.
        assert rollout.holds_a_lease() == [False, False]
