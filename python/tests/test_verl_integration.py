"""The verl checkpoint-engine backend (laminar.integrations.verl) against real relays: a trainer
engine publishes a torch module's parameters, a rollout engine receives them bit for bit as
zero-copy views; versions, leases, layouts, options and errors.

verl itself cannot be imported here (it needs torch >= 2 through tensordict; this machine has
Debian's torch 1.13), so the adapter's methods are driven as verl drives them
(``send_weights(generator, global_steps=...)`` on every trainer rank, ``async for`` over
``receive_weights(global_steps=...)``, ``finalize()``). Where verl is importable, the
registration test checks the real registry and base class; with ``LAMINAR_VERL_SOURCE`` set to
an unpacked verl (``pip download verl --no-deps`` + unzip), the conformance test runs the round
trip through the real ``CheckpointEngineRegistry`` and ``CheckpointEngineWithCache`` classes
taken from verl's source. test/engines/verl.test.ts runs this file in the real-engine
environment (.venv-engines: torch 2, verl 0.9.1 and ray), where verl imports and nothing is skipped
but the test of a laminar without verl.
"""

from __future__ import annotations

import abc
import ast
import asyncio
import inspect
import os
import threading
from pathlib import Path
from typing import Any, AsyncGenerator, Generator, Iterator, Optional

import numpy as np
import pytest

from laminar import LaminarError, RelayClient, error_codes
from laminar.integrations import verl as laminar_verl
from laminar.integrations.verl import LaminarCheckpointEngine

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(120)

MODEL = "org/policy"


class Policy(torch.nn.Module):
    """Parameters of several dtypes (float32, bfloat16, float16) and an integer buffer, with
    values that tell bits apart (-0.0, inf, nan, subnormals)."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.embed = torch.nn.Parameter(torch.randn(64, 16, generator=g).to(torch.bfloat16))
        self.proj = torch.nn.Linear(16, 24)
        self.norm = torch.nn.Parameter(torch.randn(24, generator=g).to(torch.float16))
        self.head = torch.nn.Parameter(torch.randn(24, 8, generator=g))
        with torch.no_grad():
            self.proj.weight.copy_(torch.randn(24, 16, generator=g))
            self.head[0, :5] = torch.tensor([-0.0, float("inf"), float("-inf"), float("nan"), 1e-45])
        self.register_buffer("positions", torch.arange(17, dtype=torch.int64) * 1_000_003)

    def weights(self) -> Iterator[tuple[str, Any]]:
        """What verl's ``get_per_tensor_param()`` is: a generator of (name, tensor)."""
        yield from self.named_parameters()
        yield from self.named_buffers()

    def expected(self) -> dict[str, Any]:
        return {name: t.detach().clone() for name, t in self.weights()}


def bits(t: Any) -> Any:
    """The tensor's bits as integers of its width (NaN == NaN, -0.0 != 0.0)."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(ints)


def assert_same_bits(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert list(got) == list(want)
    for name, t in want.items():
        assert got[name].dtype == t.dtype, name
        assert got[name].shape == t.shape, name
        assert torch.equal(bits(got[name]), bits(t)), name


async def collect(weights: Any) -> dict[str, Any]:
    """What a verl server adapter does: ``async for name, tensor in weights``."""
    return {name: tensor async for name, tensor in weights}


class CountingStream:
    """A (name, tensor) generator that records how far it was consumed."""

    def __init__(self, items: list[tuple[str, Any]]) -> None:
        self.items = items
        self.consumed = 0

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        for item in self.items:
            self.consumed += 1
            yield item


def engine(relay: Any, **kwargs: Any) -> LaminarCheckpointEngine:
    options = {"model": MODEL, "socket": relay.socket_path, **kwargs}
    return LaminarCheckpointEngine(bucket_size=2048 << 20, **options)


def versions_at(relay: Any) -> dict[int, dict[str, Any]]:
    with RelayClient(relay.socket_path) as client:
        return {int(v["version"]): v for v in client.status()["versions"] if v["model"] == MODEL}


@pytest.fixture
def relay(module_relay):
    """The module's relay, shared by its cases (conftest.py's module_relay)."""
    return module_relay


@pytest.fixture(autouse=True)
def model_of_the_case(model_name, monkeypatch):
    """Each case publishes under a model of its own on the shared relay: ``MODEL``, which the
    helpers and the cases read, names it for the case's duration."""
    monkeypatch.setitem(globals(), "MODEL", model_name)


@pytest.fixture
def engines(relay):
    trainer = engine(relay, client_name="trainer rank 0")
    rollout = engine(relay, client_name="rollout")
    yield trainer, rollout
    trainer.close()
    rollout.close()


# -- round trip --------------------------------------------------------------------------------


async def test_parameters_arrive_bit_for_bit_as_views_of_the_relays_memory(relay, engines):
    trainer, rollout = engines
    policy = Policy(seed=1)
    metrics = await trainer.send_weights(policy.weights(), global_steps=3)
    assert metrics["laminar/version"] == 3 and metrics["laminar/staged"] == 1 and metrics["laminar/skipped"] == 0

    got = await collect(rollout.receive_weights(global_steps=3))
    assert_same_bits(got, policy.expected())

    # Zero-copy: each tensor lies in the leased segment at the relay's offset for it.
    lease = rollout.lease
    assert lease is not None and lease.version == 3
    base = np.frombuffer(lease._mapping, np.uint8).ctypes.data
    for name, tensor in got.items():
        assert tensor.data_ptr() == base + lease.tensors[name].offset, name


async def test_later_versions_stream_without_staging_and_arrive_exactly(relay, engines):
    trainer, rollout = engines
    first, second = Policy(seed=1), Policy(seed=2)
    await trainer.send_weights(first.weights(), global_steps=0)
    metrics = await trainer.send_weights(second.weights(), global_steps=1)
    assert metrics["laminar/staged"] == 0 and metrics["laminar/version"] == 1

    assert_same_bits(await collect(rollout.receive_weights(global_steps=1)), second.expected())
    assert_same_bits(await collect(rollout.receive_weights(global_steps=0)), first.expected())


async def test_receive_waits_for_the_version_the_trainer_is_sending(relay, engines):
    # verl's CheckpointEngineManager runs the trainer's send and the rollouts' receive together.
    trainer, rollout = engines
    policy = Policy(seed=4)
    got, metrics = await asyncio.gather(collect(rollout.receive_weights(global_steps=7)), trainer.send_weights(policy.weights(), global_steps=7))
    assert metrics["laminar/version"] == 7
    assert_same_bits(got, policy.expected())


async def test_rollout_dtype_converts_floating_point_tensors_only(relay):
    trainer = engine(relay, rollout_dtype="bfloat16")
    rollout = engine(relay)
    try:
        policy = Policy(seed=5)
        await trainer.send_weights(policy.weights(), global_steps=0)
        got = await collect(rollout.receive_weights(global_steps=0))
        want = {n: (t.to(torch.bfloat16) if t.is_floating_point() else t) for n, t in policy.expected().items()}
        assert_same_bits(got, want)
        assert got["positions"].dtype == torch.int64
    finally:
        trainer.close()
        rollout.close()


# -- versions ----------------------------------------------------------------------------------


async def test_versions_advance_without_global_steps_and_continue_after_the_relays_newest(relay):
    with RelayClient(relay.socket_path) as client:  # an earlier trainer's last version
        client.publish(MODEL, 5, {"x": torch.zeros(2)}).wait_visible(timeout=60)
    trainer, rollout = engine(relay), engine(relay)
    try:
        seen = []
        for seed in (1, 2, 3):
            policy = Policy(seed=seed)
            metrics = await trainer.send_weights(policy.weights())
            got = await collect(rollout.receive_weights())
            seen.append((metrics["laminar/version"], rollout.lease.version))
            assert_same_bits(got, policy.expected())
        assert seen == [(6, 6), (7, 7), (8, 8)]
    finally:
        trainer.close()
        rollout.close()


async def test_the_same_step_twice_publishes_once_and_consumes_the_stream(relay, engines):
    # verl syncs the same global step again to wake rollouts (after validation, critic warm-up).
    trainer, rollout = engines
    policy = Policy(seed=1)
    await trainer.send_weights(policy.weights(), global_steps=4)
    again = CountingStream(list(Policy(seed=9).weights()))
    metrics = await trainer.send_weights(again, global_steps=4)
    assert metrics["laminar/skipped"] == 1 and again.consumed == len(again.items)
    assert list(versions_at(relay)) == [4]
    assert_same_bits(await collect(rollout.receive_weights(global_steps=4)), policy.expected())


async def test_versions_never_go_back(relay, engines):
    trainer, _ = engines
    await trainer.send_weights(Policy(seed=1).weights(), global_steps=5)
    stream = CountingStream(list(Policy(seed=2).weights()))
    with pytest.raises(LaminarError) as err:
        await trainer.send_weights(stream, global_steps=4)
    assert err.value.code == error_codes.VERSION_STALE
    assert stream.consumed == len(stream.items)
    assert list(versions_at(relay)) == [5]


async def test_a_version_published_by_someone_else_is_refused_with_a_typed_error(relay, engines):
    trainer, _ = engines
    with RelayClient(relay.socket_path) as client:
        client.publish(MODEL, 2, {"x": torch.zeros(2)}).wait_visible(timeout=60)
    stream = CountingStream(list(Policy(seed=1).weights()))
    with pytest.raises(LaminarError) as err:
        await trainer.send_weights(stream, global_steps=2)
    assert err.value.code == error_codes.VERSION_EXISTS
    assert stream.consumed == len(stream.items)


# -- ranks and layouts -------------------------------------------------------------------------


async def test_other_trainer_ranks_consume_their_stream_and_publish_nothing(relay):
    # No relay needed on such a rank: it never connects.
    rank1 = LaminarCheckpointEngine(bucket_size=1 << 20, is_master=False, model=MODEL, socket=str(Path(relay.root) / "nobody.sock"))
    stream = CountingStream(list(Policy(seed=1).weights()))
    assert await rank1.send_weights(stream, global_steps=0) == {}
    assert stream.consumed == len(stream.items)
    assert versions_at(relay) == {}
    rank1.close()


async def test_a_changed_layout_fails_typed_is_aborted_and_the_next_send_stages_again(relay, engines):
    trainer, rollout = engines
    await trainer.send_weights(Policy(seed=1).weights(), global_steps=0)

    missing = CountingStream(list(Policy(seed=2).weights())[:-1])
    with pytest.raises(LaminarError) as err:
        await trainer.send_weights(missing, global_steps=1)
    assert err.value.code == error_codes.INCOMPLETE
    assert list(versions_at(relay)) == [0]  # aborted
    second = Policy(seed=2)
    metrics = await trainer.send_weights(second.weights(), global_steps=1)
    assert metrics["laminar/staged"] == 1  # the layout was forgotten: learnt again

    items = list(Policy(seed=3).weights())
    items[0] = (items[0][0], items[0][1].detach().reshape(16, 64))  # same bytes, another shape
    stream = CountingStream(items)
    with pytest.raises(LaminarError) as err:
        await trainer.send_weights(stream, global_steps=2)
    assert err.value.code == error_codes.BAD_TENSOR
    assert stream.consumed == len(items)  # the other ranks' gathers went on to the end
    assert list(versions_at(relay)) == [0, 1]

    renamed = [("extra." + name, t) for name, t in Policy(seed=3).weights()]
    metrics = await trainer.send_weights(iter(renamed), global_steps=2)
    assert metrics["laminar/staged"] == 1
    assert_same_bits(await collect(rollout.receive_weights(global_steps=2)), {n: t.detach() for n, t in renamed})
    assert_same_bits(await collect(rollout.receive_weights(global_steps=1)), second.expected())


async def test_a_stream_yielding_a_name_twice_is_refused(relay, engines):
    trainer, _ = engines
    items = list(Policy(seed=1).weights())
    with pytest.raises(LaminarError) as err:
        await trainer.send_weights(iter(items + items[:1]), global_steps=0)
    assert err.value.code == error_codes.DUPLICATE_TENSOR
    assert versions_at(relay) == {}


# -- leases ------------------------------------------------------------------------------------


async def test_the_lease_is_held_until_finalize_or_the_next_receive(relay, engines):
    trainer, rollout = engines
    await trainer.send_weights(Policy(seed=1).weights(), global_steps=0)
    await collect(rollout.receive_weights(global_steps=0))
    assert versions_at(relay)[0]["leases"] == 1  # held while the rollout loads

    rollout.finalize()  # verl calls it once every rollout's update_weights returned
    assert rollout.lease is None and versions_at(relay)[0]["leases"] == 0

    await collect(rollout.receive_weights(global_steps=0))
    await trainer.send_weights(Policy(seed=2).weights(), global_steps=1)
    await collect(rollout.receive_weights(global_steps=1))
    held = versions_at(relay)
    assert held[1]["leases"] == 1
    assert 0 not in held or held[0]["leases"] == 0  # released once v1 was held (then retired)

    rollout.close()
    assert versions_at(relay)[1]["leases"] == 0


async def test_get_weights_gives_the_newest_version_held_now(relay, engines):
    trainer, rollout = engines
    newest = Policy(seed=2)
    await trainer.send_weights(Policy(seed=1).weights(), global_steps=0)
    await trainer.send_weights(newest.weights(), global_steps=1)
    assert_same_bits(await collect(rollout.get_weights()), newest.expected())
    assert rollout.lease.version == 1


# -- errors and options ------------------------------------------------------------------------


async def test_no_relay_is_a_typed_error_on_both_sides(relay, tmp_path):
    nobody = str(tmp_path / "nobody.sock")
    trainer = LaminarCheckpointEngine(bucket_size=0, is_master=True, model=MODEL, socket=nobody)
    rollout = LaminarCheckpointEngine(bucket_size=0, model=MODEL, socket=nobody)
    stream = CountingStream(list(Policy(seed=1).weights()))
    with pytest.raises(LaminarError) as err:
        await trainer.send_weights(stream, global_steps=0)
    assert err.value.code == error_codes.CLOSED
    assert stream.consumed == len(stream.items)
    with pytest.raises(LaminarError) as err:
        await collect(rollout.receive_weights(global_steps=0))
    assert err.value.code == error_codes.CLOSED


async def test_a_model_the_relay_does_not_hold_is_a_typed_error(relay, engines):
    trainer, _ = engines
    await trainer.send_weights(Policy(seed=1).weights(), global_steps=0)
    other = engine(relay, model="org/other", receive_timeout_s=0.2)
    try:
        with pytest.raises(LaminarError) as err:
            await collect(other.get_weights())
        assert err.value.code == error_codes.UNKNOWN_MODEL
        with pytest.raises(LaminarError) as err:
            await collect(other.receive_weights(global_steps=0))
        assert err.value.code == error_codes.TIMEOUT
        assert other.lease is None
    finally:
        other.close()


class RecordingCudart:
    """torch.cuda.cudart() as a driver that takes every registration and records it (this
    machine has no GPU; scripts/gpu-check.sh runs the real one)."""

    def __init__(self) -> None:
        self.registered: set[int] = set()
        self.calls = 0

    def cudaHostRegister(self, pointer: int, nbytes: int, flags: int) -> int:
        self.registered.add(pointer)
        self.calls += 1
        return 0

    def cudaHostUnregister(self, pointer: int) -> int:
        self.registered.remove(pointer)
        return 0


async def test_with_cuda_each_leased_version_is_page_locked_while_held(relay, engines, monkeypatch):
    trainer, rollout = engines
    cudart = RecordingCudart()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "cudart", lambda: cudart)
    await trainer.send_weights(Policy(seed=1).weights(), global_steps=0)
    await collect(rollout.receive_weights(global_steps=0))
    first = rollout.lease
    assert first.cuda_registration is not None and len(cudart.registered) == 1
    await trainer.send_weights(Policy(seed=2).weights(), global_steps=1)
    await collect(rollout.receive_weights(global_steps=1))
    # The new version is locked, the previous one unlocked with its release.
    assert rollout.lease.cuda_registration is not None and first.cuda_registration is None
    assert len(cudart.registered) == 1 and cudart.calls == 2
    rollout.finalize()
    assert cudart.registered == set()


async def test_register_cuda_asked_for_without_a_device_fails_the_sync_and_holds_nothing(relay, engines, monkeypatch):
    trainer, _ = engines
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    await trainer.send_weights(Policy(seed=1).weights(), global_steps=0)
    pinned = engine(relay, client_name="rollout", register_cuda=True)
    unpinned = engine(relay, client_name="rollout")  # the default: only where CUDA is
    try:
        with pytest.raises(LaminarError) as err:
            await collect(pinned.receive_weights(global_steps=0))
        assert err.value.code == error_codes.CUDA_REGISTER_REFUSED
        assert pinned.lease is None
        received = await collect(unpinned.receive_weights(global_steps=0))
        assert received and unpinned.lease.cuda_registration is None
    finally:
        pinned.close()
        unpinned.close()
    assert all(v["leases"] == 0 for v in versions_at(relay).values())


async def test_a_closed_engine_refuses_typed(relay, engines):
    trainer, _ = engines
    trainer.close()
    with pytest.raises(LaminarError) as err:
        await trainer.send_weights(Policy(seed=1).weights(), global_steps=0)
    assert err.value.code == error_codes.CLOSED


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model": MODEL, "bucket": 1},  # a typo of an option
        {"socket": "/tmp/x.sock"},  # no model, no $LAMINAR_MODEL
        {"model": MODEL, "rollout_dtype": "int8"},
        {"model": MODEL, "rollout_dtype": "bfloat17"},
        {"model": MODEL, "receive_timeout_s": 0},
        {"model": MODEL, "socket": ""},
        {"model": MODEL, "register_cuda": "yes"},
    ],
)
def test_bad_options_are_invalid_arg(kwargs, monkeypatch):
    monkeypatch.delenv(laminar_verl.MODEL_ENV, raising=False)
    with pytest.raises(LaminarError) as err:
        LaminarCheckpointEngine(bucket_size=0, **kwargs)
    assert err.value.code == error_codes.INVALID_ARG


def test_the_model_comes_from_the_environment_when_not_given(monkeypatch):
    monkeypatch.setenv(laminar_verl.MODEL_ENV, "org/from-env")
    assert LaminarCheckpointEngine(bucket_size=0).options.model == "org/from-env"


def test_topology_hooks_do_nothing():
    trainer_kwargs, rollout_kwargs = LaminarCheckpointEngine.build_topology(4, 8, [None] * 12)
    assert trainer_kwargs == {} and rollout_kwargs == {}
    e = LaminarCheckpointEngine(bucket_size=0, model=MODEL)
    assert e.prepare() is None
    assert e.init_process_group(rank=0, world_size=9) is None
    e.finalize()
    e.close()


# -- verl itself -------------------------------------------------------------------------------


def _verl_importable() -> bool:
    return laminar_verl.VERL_IMPORT_ERROR is None


@pytest.mark.skipif(_verl_importable(), reason="verl is importable here: the registration test applies")
def test_the_module_imports_without_verl_and_registers_nothing():
    assert laminar_verl.REGISTERED is False
    assert LaminarCheckpointEngine.__mro__[1] is object


@pytest.mark.skipif(not _verl_importable(), reason=f"verl is not importable here: {laminar_verl.VERL_IMPORT_ERROR!r}")
def test_registered_in_verls_registry_as_a_cached_checkpoint_engine():
    from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry

    assert laminar_verl.REGISTERED is True
    assert CheckpointEngineRegistry.get("laminar") is LaminarCheckpointEngine
    assert issubclass(LaminarCheckpointEngine, CheckpointEngine)
    try:
        from verl.checkpoint_engine.base import CheckpointEngineWithCache
    except ImportError:
        return
    assert issubclass(LaminarCheckpointEngine, CheckpointEngineWithCache)


def _bundled_verl_source() -> Optional[str]:
    """The verl source the bootstrap unpacks into .venv/verl-src/<version>, if there is one."""
    root = Path(__file__).resolve().parents[2] / ".venv" / "verl-src"
    found = sorted(p for p in root.glob("*") if (p / "verl" / "checkpoint_engine" / "base.py").is_file()) if root.is_dir() else []
    return str(found[-1]) if found else None


def _installed_verl_source() -> Optional[str]:
    """The installed verl's root (the real-engine environment has verl 0.9.1), if importable."""
    if not _verl_importable():
        return None
    import verl

    return str(Path(verl.__file__).resolve().parents[1])


# test/engines/verl.test.ts runs this file in .venv-engines with LAMINAR_REQUIRE_VERL=1: there a
# verl that cannot be imported is a failure, not a skip.
if os.environ.get("LAMINAR_REQUIRE_VERL") == "1" and not _verl_importable():
    raise ImportError(f"verl is required here (LAMINAR_REQUIRE_VERL=1) but cannot be imported: {laminar_verl.VERL_IMPORT_ERROR!r}")

VERL_SOURCE = os.environ.get("LAMINAR_VERL_SOURCE") or _installed_verl_source() or _bundled_verl_source()
_VERL_CLASSES = ("CheckpointEngineRegistry", "CheckpointEngine", "CheckpointEngineWithCache")


def _verl_base_classes(root: str) -> dict[str, Any]:
    """verl's registry and engine base classes, compiled from ``verl/checkpoint_engine/base.py``
    of an unpacked verl without running the rest of that module (its imports need ray and torch
    2): the class bodies are verl's own."""
    path = Path(root) / "verl" / "checkpoint_engine" / "base.py"
    tree = ast.parse(path.read_text(), str(path))
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name in _VERL_CLASSES]
    namespace: dict[str, Any] = {
        "__name__": "verl_checkpoint_engine_base",
        "ABC": abc.ABC,
        "abstractmethod": abc.abstractmethod,
        "Any": Any,
        "AsyncGenerator": AsyncGenerator,
        "Generator": Generator,
        "torch": torch,
    }
    exec(compile(ast.Module(body=classes, type_ignores=[]), str(path), "exec"), namespace)
    return {name: namespace[name] for name in _VERL_CLASSES if name in namespace}


@pytest.mark.skipif(not VERL_SOURCE, reason="no verl source: the bootstrap unpacks one into .venv/verl-src (or set LAMINAR_VERL_SOURCE)")
async def test_conforms_to_verls_base_classes_from_source(relay):
    real = _verl_base_classes(VERL_SOURCE or "")
    base = real.get("CheckpointEngineWithCache", real["CheckpointEngine"])

    # Every abstract method verl declares is implemented, and takes every call verl's takes:
    # its required parameters by position, its optional ones (global_steps) by name.
    for name in base.__abstractmethods__:
        ours = inspect.signature(getattr(LaminarCheckpointEngine, name))
        theirs = inspect.signature(getattr(base, name))
        positional = [p.name for p in theirs.parameters.values() if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        named = {p.name: None for p in theirs.parameters.values() if p.default is not p.empty}
        ours.bind(*positional, **named)  # TypeError when verl's call would not fit

    registry = real["CheckpointEngineRegistry"]
    conformant = registry.register("laminar")(type("LaminarOnVerlBase", (LaminarCheckpointEngine, base), {}))
    assert not conformant.__abstractmethods__
    # As verl builds them: engine_kwargs after bucket_size (and is_master on the trainer).
    kwargs = {"model": MODEL, "socket": relay.socket_path}
    trainer = registry.new("laminar", is_master=True, bucket_size=2048 << 20, **kwargs)
    rollout = registry.new("laminar", bucket_size=2048 << 20, **kwargs)
    try:
        policy = Policy(seed=6)
        send = trainer.send_weights(policy.weights(), **({"global_steps": 2} if "global_steps" in inspect.signature(base.send_weights).parameters else {}))
        await send
        assert_same_bits(await collect(rollout.receive_weights()), policy.expected())
    finally:
        trainer.close()
        rollout.close()


def test_engine_runs_in_a_thread_of_its_own_loop(relay):
    # verl's Ray workers each run their own event loop; nothing here depends on pytest's.
    result: dict[str, Any] = {}

    def worker() -> None:
        e = engine(relay)
        try:
            result["metrics"] = asyncio.run(e.send_weights(Policy(seed=1).weights(), global_steps=0))
        finally:
            e.close()

    t = threading.Thread(target=worker)
    t.start()
    t.join(60)
    assert result["metrics"]["laminar/version"] == 0
