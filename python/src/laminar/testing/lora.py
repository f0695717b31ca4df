"""LoRA adapters of a TinyLM in PEFT's layout: written by a trainer, read and applied by the
reference engine.

An adapter directory (what PEFT's `save_pretrained` writes, and what SGLang's
`/load_lora_adapter` and vLLM's `/v1/load_lora_adapter` read):

    adapter_config.json        {"peft_type": "LORA", "r", "lora_alpha", "target_modules",
                                "base_model_name_or_path", "bias": "none", ...}
    adapter_model.safetensors  base_model.model.<module path>.lora_A.weight   [r, in_features]
                               base_model.model.<module path>.lora_B.weight   [out_features, r]

`<module path>` is a linear layer of the base model (TinyLM: `layers.{i}.attn.qkv`,
`layers.{i}.attn.out`, `layers.{i}.mlp.fc_in`, `layers.{i}.mlp.fc_out`, `lm_head`). A target
module's output becomes `W x + b + scale * B (A x)` with `scale = lora_alpha / r` (PEFT's default;
rsLoRA, DoRA and per-module ranks are refused, not approximated). `target_modules` matches as PEFT
matches: a list names module-path suffixes (`"qkv"` matches `layers.0.attn.qkv`), a string is a
regular expression the whole path must match.

The adapter is applied with forward hooks on the base model's linear layers, so that the base
model is never modified and, with no adapter, runs exactly as before:
- `applied(model, adapter)`: every row of every call (training, a prefill of one sequence);
- `applied_per_row(model, rows)`: row i of the batch with `rows[i]` (an adapter or None), what
  the engine's decode step does for a batch that mixes adapters and the base.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from .. import error_codes
from ..errors import LaminarError
from .model import write_directory

ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
KEY_PREFIX = "base_model.model."
"""What PEFT puts before a module path in the keys of a saved adapter."""

DEFAULT_TARGET_MODULES = ("qkv", "out", "fc_in", "fc_out")
"""Every linear layer of TinyLM's blocks (attention and MLP); the output head is left alone."""

PathLike = Union[str, "os.PathLike[str]"]
_KEY = re.compile(r"^base_model\.model\.(.+)\.lora_([AB])\.weight$")
# adapter_config.json fields PEFT writes that change the math: refused unless absent, null, false or empty.
_UNSUPPORTED = ("use_rslora", "use_dora", "rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform")


def _mismatch(message: str, **details: Any) -> LaminarError:
    return LaminarError(error_codes.MODEL_MISMATCH, message, details or None)


@dataclass(frozen=True)
class LoraConfig:
    """The part of `adapter_config.json` that decides the math."""

    r: int
    lora_alpha: float
    target_modules: Union[tuple[str, ...], str] = DEFAULT_TARGET_MODULES
    base_model_name_or_path: Optional[str] = None

    def __post_init__(self) -> None:
        if not isinstance(self.r, int) or isinstance(self.r, bool) or self.r < 1:
            raise _mismatch(f"adapter_config.json: r must be a positive integer, got {self.r!r}")
        if isinstance(self.lora_alpha, bool) or not isinstance(self.lora_alpha, (int, float)) or not math.isfinite(self.lora_alpha) or self.lora_alpha <= 0:
            raise _mismatch(f"adapter_config.json: lora_alpha must be a positive number, got {self.lora_alpha!r}")
        targets = self.target_modules
        if isinstance(targets, str):
            try:
                re.compile(targets)
            except re.error as err:
                raise _mismatch(f"adapter_config.json: target_modules {targets!r} is not a regular expression: {err}") from None
        elif not targets or not all(isinstance(t, str) and t for t in targets):
            raise _mismatch(f"adapter_config.json: target_modules must be a non-empty list of module names or a regular expression, got {targets!r}")

    @property
    def scale(self) -> float:
        """What B A x is multiplied by: lora_alpha / r."""
        return self.lora_alpha / self.r

    def targets(self, path: str) -> bool:
        """Whether module `path` is a target (PEFT's rule: a regex matches the whole path, a name its last components)."""
        if isinstance(self.target_modules, str):
            return re.fullmatch(self.target_modules, path) is not None
        return any(path == t or path.endswith("." + t) for t in self.target_modules)

    def to_json(self) -> dict[str, Any]:
        """adapter_config.json, with the fields PEFT's loader expects."""
        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return {
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": self.base_model_name_or_path,
            "r": self.r,
            "lora_alpha": self.lora_alpha,
            "lora_dropout": 0.0,
            "target_modules": targets,
            "bias": "none",
            "fan_in_fan_out": False,
            "use_rslora": False,
            "use_dora": False,
            "modules_to_save": None,
            "inference_mode": True,
        }

    @classmethod
    def from_json(cls, obj: Any) -> "LoraConfig":
        """Reads an adapter_config.json object; what the reference engine cannot apply exactly is refused."""
        if not isinstance(obj, Mapping):
            raise _mismatch(f"adapter_config.json must hold an object, got {type(obj).__name__}")
        if obj.get("peft_type") != "LORA":
            raise _mismatch(f"adapter_config.json: peft_type is {obj.get('peft_type')!r}, expected 'LORA'")
        for key in ("r", "lora_alpha", "target_modules"):
            if key not in obj:
                raise _mismatch(f"adapter_config.json: {key} is missing")
        if obj.get("bias", "none") != "none":
            raise _mismatch(f"adapter_config.json: bias {obj['bias']!r} is not supported (only 'none')")
        for key in _UNSUPPORTED:
            value = obj.get(key)
            if not (value is None or value is False or value == [] or value == {}):
                raise _mismatch(f"adapter_config.json: {key} = {json.dumps(value)} is not supported by the reference engine")
        base = obj.get("base_model_name_or_path")
        if base is not None and not isinstance(base, str):
            raise _mismatch(f"adapter_config.json: base_model_name_or_path must be a string, got {base!r}")
        targets = obj["target_modules"]
        return cls(
            r=obj["r"], lora_alpha=obj["lora_alpha"], target_modules=targets if isinstance(targets, str) else tuple(targets), base_model_name_or_path=base
        )


@dataclass(frozen=True)
class LoraWeights:
    """A validated adapter: per target module path, A [r, in] and B [out, r] (float32), and its scale."""

    config: LoraConfig
    modules: Mapping[str, tuple[torch.Tensor, torch.Tensor]]
    lora_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Unique per load: two loads of one name are two adapters (what a cache keys on)."""

    @property
    def scale(self) -> float:
        return self.config.scale


def linear_modules(model: nn.Module) -> dict[str, nn.Linear]:
    """The model's linear layers by module path."""
    return {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}


def peft_key(path: str, which: str) -> str:
    """The safetensors key of a module's A or B (`which` "A" or "B")."""
    return f"{KEY_PREFIX}{path}.lora_{which}.weight"


def save_lora_adapter(directory: PathLike, modules: Mapping[str, tuple[torch.Tensor, torch.Tensor]], config: LoraConfig) -> Path:
    """Writes an adapter directory (made if missing) from A/B per module path; returns it (files
    renamed into place, the weights first: `write_directory`)."""
    tensors: dict[str, torch.Tensor] = {}
    for path, (a, b) in modules.items():
        tensors[peft_key(path, "A")] = a.detach().to(torch.float32).contiguous()
        tensors[peft_key(path, "B")] = b.detach().to(torch.float32).contiguous()
    return write_directory(directory, ADAPTER_WEIGHTS_FILE, tensors, {"format": "pt"}, ADAPTER_CONFIG_FILE, config.to_json())


def read_lora_config(directory: PathLike) -> LoraConfig:
    path = Path(directory) / ADAPTER_CONFIG_FILE
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise _mismatch(f"{path} does not exist", path=str(path)) from None
    except (OSError, ValueError) as err:
        raise _mismatch(f"cannot parse {path}: {err}", path=str(path)) from None
    return LoraConfig.from_json(obj)


def pair_tensors(tensors: Mapping[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """PEFT keys → {module path: (A, B)}; a key of another form, or an A without its B, is refused."""
    halves: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        match = _KEY.match(key)
        if match is None:
            raise _mismatch(f"{key} is not a LoRA tensor (expected base_model.model.<module>.lora_A.weight or .lora_B.weight)", tensor=key)
        halves.setdefault(match.group(1), {})[match.group(2)] = tensor
    for path, pair in halves.items():
        for which in "AB":
            if which not in pair:
                raise _mismatch(f"{peft_key(path, which)} is missing (every module needs lora_A and lora_B)", tensor=peft_key(path, which))
    if not halves:
        raise _mismatch("the adapter holds no LoRA tensors")
    return {path: (pair["A"], pair["B"]) for path, pair in halves.items()}


def check_fits(modules: Mapping[str, tuple[torch.Tensor, torch.Tensor]], config: LoraConfig, model: nn.Module) -> None:
    """Refuses an adapter that does not fit `model`: a module it does not have (an adapter of another
    base), a module outside target_modules, or shapes other than A [r, in] and B [out, r]."""
    linears = linear_modules(model)
    for path, (a, b) in sorted(modules.items()):
        layer = linears.get(path)
        if layer is None:
            raise _mismatch(f"the adapter is for another base model: {path} is not a linear layer of the served model", module=path)
        if not config.targets(path):
            raise _mismatch(f"{path} has LoRA weights but is not in target_modules {config.target_modules!r}", module=path)
        want_a, want_b = (config.r, layer.in_features), (layer.out_features, config.r)
        if tuple(a.shape) != want_a or tuple(b.shape) != want_b:
            raise _mismatch(
                f"the adapter does not fit the served model: {path} has lora_A {list(a.shape)} and lora_B {list(b.shape)}, "
                f"expected {list(want_a)} and {list(want_b)} (r {config.r}, layer {layer.in_features} -> {layer.out_features})",
                module=path,
            )
        if not (a.is_floating_point() and b.is_floating_point()):
            raise _mismatch(f"{path}: LoRA weights must be floating point, got {a.dtype} and {b.dtype}", module=path)


def read_lora_adapter(directory: PathLike, model: nn.Module) -> LoraWeights:
    """Reads and validates an adapter directory against the base `model`; raises `LaminarError`
    (`ERR_MODEL_MISMATCH`, `ERR_BAD_SAFETENSORS`) saying what is wrong."""
    directory = Path(directory)
    if not directory.is_dir():
        raise _mismatch(f"{directory} is not a directory", path=str(directory))
    config = read_lora_config(directory)
    path = directory / ADAPTER_WEIGHTS_FILE
    try:
        tensors = load_file(str(path))
    except FileNotFoundError:
        raise _mismatch(f"{path} does not exist", path=str(path)) from None
    except (OSError, SafetensorError) as err:
        raise LaminarError(error_codes.BAD_SAFETENSORS, f"cannot read {path}: {err}", {"path": str(path)}) from None
    modules = pair_tensors(tensors)
    check_fits(modules, config, model)
    as_f32 = {p: (a.to(torch.float32).contiguous(), b.to(torch.float32).contiguous()) for p, (a, b) in modules.items()}
    return LoraWeights(config, as_f32)


def merged_state_dict(model: nn.Module, adapter: LoraWeights) -> dict[str, torch.Tensor]:
    """The base model's state dict with every target weight replaced by W + scale * B @ A."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for path, (a, b) in adapter.modules.items():
        state[f"{path}.weight"] = state[f"{path}.weight"] + adapter.scale * (b @ a)
    return state


def _delta(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.matmul(torch.matmul(x, a.t()), b.t()) * scale


@contextlib.contextmanager
def applied(model: nn.Module, adapter: Union[LoraWeights, "LoraAdapter"]) -> Iterator[None]:
    """Within the block, every call of the model runs with `adapter` (gradients flow into a
    trainable `LoraAdapter`'s A and B)."""
    modules = adapter.modules if isinstance(adapter, LoraWeights) else adapter.pairs()
    scale = adapter.scale
    linears = linear_modules(model)
    handles = []

    def hook_for(a: torch.Tensor, b: torch.Tensor) -> Any:
        return lambda _module, inputs, output: output + _delta(inputs[0], a, b, scale)

    try:
        for path, (a, b) in modules.items():
            handles.append(linears[path].register_forward_hook(hook_for(a, b)))
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def applied_per_row(model: nn.Module, rows: Sequence[Optional[LoraWeights]]) -> Iterator[None]:
    """Within the block, row i of a call's batch (the first dimension) runs with `rows[i]`: None is
    the base model. All rows None: no hook at all (the base path, untouched). All rows the same
    adapter: `applied`."""
    distinct = {id(r): r for r in rows if r is not None}
    if not distinct:
        yield
        return
    if len(distinct) == 1 and all(r is not None for r in rows):
        with applied(model, next(iter(distinct.values()))):
            yield
        return
    # Per module path: each adapter that targets it, with the batch rows that use it.
    groups: dict[str, list[tuple[LoraWeights, torch.Tensor]]] = {}
    for adapter in distinct.values():
        index = torch.tensor([i for i, r in enumerate(rows) if r is adapter], dtype=torch.long)
        for path in adapter.modules:
            groups.setdefault(path, []).append((adapter, index))
    linears = linear_modules(model)

    def hook_for(path: str) -> Any:
        def hook(_module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> torch.Tensor:
            x = inputs[0]
            out = output.clone()
            for adapter, index in groups[path]:
                a, b = adapter.modules[path]
                out.index_add_(0, index, _delta(x.index_select(0, index), a, b, adapter.scale))
            return out

        return hook

    handles = [linears[path].register_forward_hook(hook_for(path)) for path in groups]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


class LoraAdapter(nn.Module):
    """A trainable adapter for `model`'s target modules, initialised as PEFT does (A Kaiming-uniform,
    B zeros: the adapted model starts equal to the base). Its parameters are the only ones a
    LoRA trainer optimises; `with applied(model, adapter):` runs the model with it."""

    def __init__(self, model: nn.Module, config: LoraConfig) -> None:
        super().__init__()
        self.config = config
        targets = {path: layer for path, layer in linear_modules(model).items() if config.targets(path)}
        if not targets:
            raise LaminarError(error_codes.INVALID_ARG, f"target_modules {config.target_modules!r} match no linear layer of the model")
        self.paths = sorted(targets)
        self.lora_a = nn.ParameterList()
        self.lora_b = nn.ParameterList()
        for path in self.paths:
            layer = targets[path]
            a = torch.empty(config.r, layer.in_features)
            nn.init.kaiming_uniform_(a, a=math.sqrt(5))
            self.lora_a.append(nn.Parameter(a))
            self.lora_b.append(nn.Parameter(torch.zeros(layer.out_features, config.r)))

    @property
    def scale(self) -> float:
        return self.config.scale

    def pairs(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """{module path: (A, B)}, the parameters themselves (gradients flow)."""
        return {path: (self.lora_a[i], self.lora_b[i]) for i, path in enumerate(self.paths)}

    def peft_state_dict(self) -> dict[str, torch.Tensor]:
        """The tensors under PEFT's keys (what `get_peft_model_state_dict` gives), detached copies."""
        out: dict[str, torch.Tensor] = {}
        for path, (a, b) in self.pairs().items():
            out[peft_key(path, "A")] = a.detach().clone().contiguous()
            out[peft_key(path, "B")] = b.detach().clone().contiguous()
        return out

    def save(self, directory: PathLike) -> Path:
        """The adapter directory (PEFT layout)."""
        return save_lora_adapter(directory, self.pairs(), self.config)


class LoraModel(nn.Module):
    """A base model, frozen, with a trainable `LoraAdapter`: what a LoRA trainer optimises.

    `forward` (and `prefill`/`decode` of a TinyLM) run the base model with the adapter applied;
    `trainable_parameters()` are the adapter's A and B only, the parameters an optimiser gets.
    """

    def __init__(self, base: nn.Module, config: LoraConfig) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.adapter = LoraAdapter(base, config)

    @property
    def config(self) -> Any:
        """The base model's config (what code written for the base model reads)."""
        return getattr(self.base, "config", None)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return list(self.adapter.parameters())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with applied(self.base, self.adapter):
            return self.base(*args, **kwargs)

    def merged_state_dict(self) -> dict[str, torch.Tensor]:
        """The base weights with the adapter merged in: a full model that computes what this one does."""
        weights = LoraWeights(self.adapter.config, {p: (a.detach(), b.detach()) for p, (a, b) in self.adapter.pairs().items()})
        return merged_state_dict(self.base, weights)
