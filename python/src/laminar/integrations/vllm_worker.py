"""laminar's vLLM worker extension: reload the weights from a laminar version directory.

vLLM has no HTTP endpoint that loads a directory and checks it (docs/reference/vllm.md). Started with
``--worker-extension-cls laminar.integrations.vllm_worker.LaminarWorkerExtension``, vLLM mixes
``LaminarWorkerExtension`` into its worker class, and ``POST /collective_rpc`` (dev mode,
``VLLM_SERVER_DEV_MODE=1``) runs its methods on every worker:

- ``{"method": "laminar_reload_weights", "args": [<version dir>, "<version>"]}`` checks the
  directory (``model.safetensors``'s tensor names, shapes and dtypes against the weights served,
  ``config.json``'s architecture) and only then streams the file into the model, one tensor at a
  time; answers ``{"success": true, ...}`` or ``{"success": false, "message", "tensor",
  "weights_changed"}``;
- ``{"method": "laminar_weight_version"}`` answers the version last loaded, or ``None``;
- ``{"method": "laminar_engine_info"}`` answers the worker's device and how it reloads.

vLLM post-processes weights after loading them (on CPU it repacks every linear layer and empties
``layer.weight``; quantized models convert theirs): a model's ``load_weights`` called on a served
model fails on the first processed layer, after the layers before it took the new weights. Where
vLLM has layer-wise reload (``vllm.model_executor.model_loader.reload``, the wrapping its own
``reload_weights`` uses), the load goes through it: each layer gets back its checkpoint-format
parameters, is loaded, processed, and copied into the tensors the engine runs with. Older releases
load with the model's ``load_weights`` alone, and a model whose weights were processed is refused
before anything is touched.

``/collective_rpc`` answers ``{"results": [...]}``, one per worker (tensor × pipeline-parallel
rank): the caller takes the reload as done only when every result succeeded with the same version.

This module imports nothing of vLLM at import time (it is imported by vLLM, never the other way),
and torch and ``safetensors`` only when a method runs, so it imports anywhere. Every name the class
adds to the worker starts with ``laminar_`` or ``_laminar_``: vLLM refuses an extension whose names
the worker already has.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import time
from typing import Any, Iterator, NamedTuple, Optional

__all__ = [
    "WEIGHTS_FILE",
    "LaminarWorkerExtension",
    "ReloadRefused",
    "TensorSpec",
    "Manifest",
    "read_manifest",
    "read_directory_manifest",
    "read_architectures",
    "manifest_mismatch",
]

#: The weights of a laminar version directory (docs/components/relay.md#version-directories).
WEIGHTS_FILE = "model.safetensors"


class TensorSpec(NamedTuple):
    """A tensor as a safetensors header gives it: shape and dtype (``"BF16"``, ``"F32"``...)."""

    shape: tuple[int, ...]
    dtype: str


#: Tensor name -> shape and dtype.
Manifest = dict[str, TensorSpec]


class ReloadRefused(Exception):
    """A version directory that cannot be loaded; ``tensor`` names the tensor at fault, if one is."""

    def __init__(self, message: str, tensor: Optional[str] = None) -> None:
        super().__init__(message)
        self.tensor = tensor


def read_manifest(path: str) -> Manifest:
    """Names, shapes and dtypes of the tensors of one safetensors file, from its header only.

    ``safe_open`` also checks that the data offsets cover the file exactly: a truncated file raises
    here, before anything is loaded."""
    from safetensors import safe_open

    manifest: Manifest = {}
    with safe_open(path, framework="pt") as handle:
        for name in handle.keys():
            tensor = handle.get_slice(name)
            manifest[name] = TensorSpec(tuple(int(d) for d in tensor.get_shape()), str(tensor.get_dtype()))
    return manifest


def read_directory_manifest(directory: str) -> Optional[Manifest]:
    """The manifest of every ``*.safetensors`` file of a directory together (a sharded checkpoint),
    or ``None`` when ``directory`` is not a directory holding any (a hub model id, say)."""
    if not os.path.isdir(directory):
        return None
    files = sorted(glob.glob(os.path.join(directory, "*.safetensors")))
    if not files:
        return None
    manifest: Manifest = {}
    for path in files:
        manifest.update(read_manifest(path))
    return manifest


def read_architectures(directory: str) -> Optional[list[str]]:
    """``architectures`` of ``<directory>/config.json``; ``None`` when the directory has no config
    (a version directory holding only weights) or the config does not say."""
    path = os.path.join(directory, "config.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as file:
            config = json.load(file)
    except (OSError, ValueError) as err:
        raise ReloadRefused(f"{path} is not a JSON config: {err}") from err
    architectures = config.get("architectures") if isinstance(config, dict) else None
    return [str(a) for a in architectures] if isinstance(architectures, list) else None


def manifest_mismatch(expected: Manifest, found: Manifest) -> Optional[ReloadRefused]:
    """Why ``found`` (a new version) cannot replace ``expected`` (the version served), or ``None``.

    Names, shapes and dtypes must be the same: every version of a model has the layout of the first
    (a dtype that changes is a trainer publishing something else, not a cast to do quietly). The
    first problem in name order is named, with how many there are in all.
    """
    problems: list[tuple[str, str]] = []
    for name in sorted(expected.keys() | found.keys()):
        if name not in found:
            problems.append((name, f"tensor {name} is missing from the new version"))
        elif name not in expected:
            problems.append((name, f"tensor {name} of the new version is not in the version served"))
        elif found[name].shape != expected[name].shape:
            problems.append((name, f"tensor {name}: shape {list(found[name].shape)} in the new version, {list(expected[name].shape)} in the version served"))
        elif found[name].dtype != expected[name].dtype:
            problems.append((name, f"tensor {name}: dtype {found[name].dtype} in the new version, {expected[name].dtype} in the version served"))
    if not problems:
        return None
    name, message = problems[0]
    if len(problems) > 1:
        message += f" ({len(problems) - 1} more tensors differ)"
    return ReloadRefused(message, name)


class _TensorStream:
    """``(name, tensor)`` pairs of one open safetensors file, read one at a time when the loader
    asks: no more than the tensor being loaded is in host memory. Counts what was taken."""

    def __init__(self, handle: Any, names: list[str]) -> None:
        self._handle = handle
        self.names = names
        self.taken = 0
        self.bytes = 0

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return self

    def __next__(self) -> tuple[str, Any]:
        if self.taken >= len(self.names):
            raise StopIteration
        name = self.names[self.taken]
        tensor = self._handle.get_tensor(name)
        self.taken += 1
        self.bytes += tensor.numel() * tensor.element_size()
        return name, tensor


def _device_context(device: Any) -> Any:
    """``with torch.device(device)`` where torch supports it (2.0+), as vLLM loads under its worker's
    device: a model's ``load_weights`` that allocates puts the tensors there."""
    if device is None:
        return contextlib.nullcontext()
    import torch

    context = torch.device(device)
    return context if hasattr(context, "__enter__") else contextlib.nullcontext()


def _layerwise_reload() -> Any:
    """vLLM's layer-wise reload module, or ``None`` in a release without it (or without vLLM)."""
    try:
        from vllm.model_executor.model_loader.reload import layerwise
    except ImportError:
        return None
    needed = ("initialize_layerwise_reload", "finalize_layerwise_reload", "LAYERWISE_INFO")
    return layerwise if all(hasattr(layerwise, name) for name in needed) else None


class LaminarWorkerExtension:
    """Mixed into vLLM's worker class by ``--worker-extension-cls``; the methods run on every
    worker through ``collective_rpc``. ``self`` is vLLM's worker: ``self.model_runner`` holds the
    model, ``self.vllm_config.model_config`` says what was served at start.

    State kept on the worker: the version loaded last (``None`` before the first reload and after
    a reload that failed half way) and the manifest every next version must match.
    """

    def laminar_reload_weights(self, model_path: str, weight_version: str) -> dict[str, Any]:
        """Loads ``<model_path>/model.safetensors`` into this worker's model, or refuses it.

        Answers ``{"success": True, "weight_version", "model_path", "tensors", "bytes", "seconds",
        "mode"}`` or ``{"success": False, "message", "tensor", "weights_changed", "weight_version"}``,
        where ``weights_changed`` says whether any weight may have been overwritten (then the model
        holds a mix of versions and ``weight_version`` is ``None``). Never raises: the caller reads
        a refusal from the result.
        """
        started = time.perf_counter()
        version = str(weight_version)
        try:
            model = self._laminar_model()
            path, found = self._laminar_check(model_path)
            mode = self._laminar_reload_mode(model)
        except ReloadRefused as refused:
            return self._laminar_failure(str(refused), refused.tensor, weights_changed=False)
        except Exception as err:  # a header that does not parse, a file that cannot be read
            return self._laminar_failure(f"{model_path}: {type(err).__name__}: {err}", None, weights_changed=False)
        try:
            loaded_bytes = self._laminar_load(model, path, found, mode)
        except ReloadRefused as refused:
            return self._laminar_failure(str(refused), refused.tensor, weights_changed=True)
        except Exception as err:
            return self._laminar_failure(f"{path}: loading failed: {type(err).__name__}: {err}", None, weights_changed=True)
        self._laminar_weight_version = version
        self._laminar_manifest = found
        return {
            "success": True,
            "weight_version": version,
            "model_path": model_path,
            "tensors": len(found),
            "bytes": loaded_bytes,
            "seconds": round(time.perf_counter() - started, 6),
            "mode": mode,
        }

    def laminar_weight_version(self) -> Optional[str]:
        """The version of the last successful reload; ``None`` before one (the weights vLLM was
        started with) and after a reload that changed weights and failed."""
        return getattr(self, "_laminar_weight_version", None)

    def laminar_engine_info(self) -> dict[str, Any]:
        """What the rollout agent adapts to: the worker's device type (``"cpu"``, ``"cuda"``...),
        vLLM's release, and how a reload loads (``"layerwise"`` or ``"load_weights"``)."""
        device = getattr(self, "device", None)
        device_type = getattr(device, "type", None) or (str(device).split(":", 1)[0] if device is not None else None)
        try:
            import vllm

            release: Optional[str] = str(getattr(vllm, "__version__", "")) or None
        except ImportError:
            release = None
        try:
            mode: Optional[str] = self._laminar_reload_mode(self._laminar_model())
        except Exception:
            mode = None
        return {"device": device_type, "vllm": release, "reload": mode}

    # What follows runs inside laminar_reload_weights.

    def _laminar_check(self, model_path: Any) -> tuple[str, Manifest]:
        """The weights file of ``model_path`` and its manifest, once the directory fits the model
        served. Reads headers and the config only: nothing of the model is touched."""
        if not isinstance(model_path, str) or not model_path:
            raise ReloadRefused(f"model_path must be a directory path, not {model_path!r}")
        if not os.path.isdir(model_path):
            raise ReloadRefused(f"{model_path} is not a directory (has no {WEIGHTS_FILE})")
        path = os.path.join(model_path, WEIGHTS_FILE)
        if not os.path.isfile(path):
            raise ReloadRefused(f"{model_path} has no {WEIGHTS_FILE}")
        self._laminar_check_architecture(model_path)
        found = read_manifest(path)
        if not found:
            raise ReloadRefused(f"{path} holds no tensor")
        expected = self._laminar_reference()
        if expected is not None:
            mismatch = manifest_mismatch(expected, found)
            if mismatch is not None:
                raise mismatch
        return path, found

    def _laminar_check_architecture(self, model_path: str) -> None:
        """A version directory whose config names another architecture than the model served is
        refused (its tensors may even have the same names and shapes)."""
        found = read_architectures(model_path)
        if found is None:
            return
        hf_config = getattr(self._laminar_model_config(), "hf_config", None)
        served = getattr(hf_config, "architectures", None)
        if isinstance(served, (list, tuple)) and served and list(served) != found:
            raise ReloadRefused(f"{model_path}/config.json: architecture {found} in the new version, {list(served)} in the model served")

    def _laminar_reference(self) -> Optional[Manifest]:
        """The manifest of the weights served: the version loaded last, else the directory vLLM was
        started from (read once), else ``None`` (a hub id: nothing to compare the first reload with)."""
        manifest = getattr(self, "_laminar_manifest", None)
        if manifest is None and not getattr(self, "_laminar_start_read", False):
            self._laminar_start_read = True
            served = getattr(self._laminar_model_config(), "model", None)
            manifest = read_directory_manifest(served) if isinstance(served, str) else None
            self._laminar_manifest = manifest
        return manifest

    def _laminar_reload_mode(self, model: Any) -> str:
        """``"layerwise"`` where vLLM can reload this model layer by layer (its metadata was
        recorded when vLLM built it), else ``"load_weights"``, which is refused for a model whose
        weights vLLM processed after loading (an emptied parameter: CPU repacking)."""
        layerwise = _layerwise_reload()
        if layerwise is not None and model in layerwise.LAYERWISE_INFO:
            return "layerwise"
        for name, parameter in model.named_parameters():
            if parameter.numel() == 0:
                raise ReloadRefused(
                    f"parameter {name} of the model served is empty (vLLM processed the weights after loading them) "
                    "and this vLLM has no layer-wise reload: restart vLLM on the new directory",
                    name,
                )
        return "load_weights"

    def _laminar_load(self, model: Any, path: str, found: Manifest, mode: str) -> int:
        """Streams the file into the model's ``load_weights`` and checks that everything was
        loaded; answers the bytes read."""
        import torch
        from safetensors import safe_open

        # From here on a failure may leave some weights of the new version in place: the version
        # is unknown. The manifest stays: names and shapes are those of the model either way.
        self._laminar_weight_version = None
        with safe_open(path, framework="pt", device="cpu") as handle:
            stream = _TensorStream(handle, list(found.keys()))
            with torch.no_grad(), _device_context(getattr(self, "device", None)), self._laminar_loading(model, mode):
                loaded = model.load_weights(stream)
        if stream.taken < len(stream.names):
            name = stream.names[stream.taken]
            left = len(stream.names) - stream.taken
            raise ReloadRefused(f"the model's load_weights stopped before tensor {name} ({left} of {len(stream.names)} not consumed)", name)
        if isinstance(loaded, (set, frozenset)) and getattr(self._laminar_model_config(), "quantization", None) is None:
            # vLLM's models answer the parameters they loaded (AutoWeightsLoader): all of them, as
            # vLLM's own loader requires of unquantized models.
            missing = sorted({name for name, _ in model.named_parameters()} - set(loaded))
            if missing:
                more = f" ({len(missing) - 1} more)" if len(missing) > 1 else ""
                raise ReloadRefused(f"parameter {missing[0]} of the model was not loaded from {path}{more}", missing[0])
        return stream.bytes

    @contextlib.contextmanager
    def _laminar_loading(self, model: Any, mode: str) -> Iterator[None]:
        """Layer-wise: what vLLM's ``reload_weights`` does around ``load_weights``
        (``model_loader/reload/inplace.py``), under the worker's config as ``Worker.reload_weights``
        sets it. The finalisation runs even when the load raised, so that every layer is back on
        the tensors the engine runs with (layers not loaded keep their weights)."""
        if mode != "layerwise":
            yield
            return
        from vllm.config import set_current_vllm_config

        layerwise = _layerwise_reload()
        with set_current_vllm_config(self.vllm_config):
            layerwise.initialize_layerwise_reload(model)
            try:
                yield
            finally:
                layerwise.finalize_layerwise_reload(model, self._laminar_model_config())

    def _laminar_model(self) -> Any:
        """The model itself: ``get_model()`` unwraps vLLM's CUDA-graph wrappers."""
        runner = getattr(self, "model_runner", None)
        if runner is None:
            raise RuntimeError("this worker has no model_runner: not a vLLM GPU worker")
        get_model = getattr(runner, "get_model", None)
        return get_model() if callable(get_model) else runner.model

    def _laminar_model_config(self) -> Any:
        vllm_config = getattr(self, "vllm_config", None)
        model_config = getattr(vllm_config, "model_config", None)
        return model_config if model_config is not None else getattr(self, "model_config", None)

    def _laminar_failure(self, message: str, tensor: Optional[str], *, weights_changed: bool) -> dict[str, Any]:
        return {
            "success": False,
            "message": message,
            "tensor": tensor,
            "weights_changed": weights_changed,
            "weight_version": self.laminar_weight_version(),
        }
