"""The policy of the example: a `laminar.testing.TinyLM` of a named size, or (``--config llama``)
a Hugging Face Llama that a real vLLM serves (llama_policy.py), built from a seed, and the engine
files (``config.json``, and a tokenizer for vLLM) that tell an engine which model a version
directory holds."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typing import TYPE_CHECKING, Mapping, Union

import torch

from laminar import error_codes
from laminar.errors import LaminarError
from laminar.testing import TinyLM, TinyLMConfig, validate_state_dict
from laminar.testing.digits import VOCAB_SIZE
from laminar.testing.tools import VOCAB_SIZE as TOOLS_VOCAB_SIZE
from laminar.testing.model import CONFIG_FILE

#: Sizes for --config. "tiny" is the default: on one CPU thread it learns the digits task in the
#: demo's budget (offline_check.py measures it); "default" is TinyLM's own default (3.2 M
#: parameters), ~50x the compute per token.
PRESETS: dict[str, TinyLMConfig] = {
    "tiny": TinyLMConfig(vocab_size=VOCAB_SIZE, d_model=64, n_layers=2, n_heads=4, max_seq_len=32),
    "small": TinyLMConfig(vocab_size=VOCAB_SIZE, d_model=128, n_layers=3, n_heads=4, max_seq_len=32),
    "default": TinyLMConfig(vocab_size=VOCAB_SIZE),
    # The lookup task (laminar.testing.tools, the demo's --task tools): its 22-id vocabulary.
    "tiny-tools": TinyLMConfig(vocab_size=TOOLS_VOCAB_SIZE, d_model=64, n_layers=2, n_heads=4, max_seq_len=32),
}
DEFAULT_PRESET = "tiny"
#: ``--config llama``: llama_policy.py's model, for vLLM engines (needs transformers: .venv-engines).
LLAMA_PRESET = "llama"

if TYPE_CHECKING:
    from transformers import LlamaConfig

    ModelConfig = Union[TinyLMConfig, LlamaConfig]
else:
    ModelConfig = TinyLMConfig


def resolve_config(spec: str) -> "ModelConfig":
    """A preset name (`PRESETS`, or `LLAMA_PRESET`), or the path of a config.json (a model directory's, or one that
    --engine-files wrote), into a `TinyLMConfig`; anything else is ``ERR_INVALID_ARG``."""
    if spec in PRESETS:
        return PRESETS[spec]
    if spec == LLAMA_PRESET:
        from llama_policy import digits_llama_config

        return digits_llama_config()
    path = Path(spec)
    if path.is_dir():
        path = path / CONFIG_FILE
    if path.is_file():
        try:
            return TinyLMConfig.from_json(json.loads(path.read_text()))
        except ValueError as err:
            raise LaminarError(error_codes.INVALID_ARG, f"--config {spec}: not JSON ({err})") from err
    raise LaminarError(error_codes.INVALID_ARG, f"--config {spec!r} is neither a preset ({', '.join([*PRESETS, LLAMA_PRESET])}) nor a config.json")


def build_model(config: "ModelConfig", seed: int) -> torch.nn.Module:
    """A freshly initialised TinyLM, or Llama for a Llama config; the same seed and config give
    the same weights."""
    if not isinstance(config, TinyLMConfig):
        from llama_policy import build_llama

        return build_llama(config, seed)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return TinyLM(config)
    finally:
        torch.random.set_rng_state(generator_state)


def validate_tensors(tensors: Mapping[str, torch.Tensor], model: torch.nn.Module) -> None:
    """Raises ``ERR_MODEL_MISMATCH`` unless ``tensors`` (a version from the relay) are ``model``'s
    parameters, name for name and shape for shape."""
    if isinstance(model, TinyLM):
        validate_state_dict(tensors, model.config)
    else:
        from llama_policy import validate_llama_tensors

        validate_llama_tensors(tensors, model)


def write_engine_files(directory: str | os.PathLike[str], config: "ModelConfig") -> Path:
    """Writes ``config.json`` into ``directory`` (made if missing) for ``laminar relay
    --engine-files DIR``, which links it into every version directory next to the weights; the
    engine reads both. Written under a temporary name and renamed: a relay starting meanwhile never
    sees half a file. Returns the file's path."""
    if not isinstance(config, TinyLMConfig):
        from llama_policy import write_llama_engine_files

        return write_llama_engine_files(directory, config)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    path = out / CONFIG_FILE
    tmp = out / (CONFIG_FILE + ".tmp")
    tmp.write_text(json.dumps(config.to_json(), indent=2) + "\n")
    os.replace(tmp, path)
    return path
