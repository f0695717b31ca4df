"""Loading a model directory into the reference engine: `config.json` and `model.safetensors`, read
with the real safetensors library and validated strictly before anything is swapped in."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

import torch

from ... import error_codes
from ...errors import LaminarError
from ..model import CONFIG_FILE, WEIGHTS_FILE, TinyLM, TinyLMConfig, load_config, load_state_dict_file, validate_state_dict
from .fp8 import has_fp8_tensors, is_fp8_config, load_fp8_state_dict

LOAD_FORMATS = (None, "auto", "safetensors")
"""The `load_format` values the engine accepts (it reads safetensors only)."""


def _describe_difference(found: TinyLMConfig, serving: TinyLMConfig) -> str:
    diffs = [
        f"{f.name} {getattr(found, f.name)} (serving {getattr(serving, f.name)})"
        for f in dataclasses.fields(TinyLMConfig)
        if getattr(found, f.name) != getattr(serving, f.name)
    ]
    return ", ".join(diffs)


def load_weights(model_path: str, serving: Optional[TinyLMConfig], fallback: Optional[TinyLMConfig]) -> tuple[TinyLM, TinyLMConfig]:
    """A validated model from `model_path` (an FP8 directory's weights dequantised to float32).

    The directory's config.json (if present) must describe the model being served (`serving`);
    without config.json the serving config, else `fallback` (`--config`), is assumed. Raises
    `LaminarError` (`ERR_MODEL_MISMATCH`, `ERR_BAD_SAFETENSORS`) naming what is wrong.
    """
    directory = Path(model_path)
    if not directory.is_dir():
        raise LaminarError(error_codes.MODEL_MISMATCH, f"{model_path} is not a directory", {"path": model_path})
    if (directory / CONFIG_FILE).exists():
        config = load_config(directory)
    elif serving is not None or fallback is not None:
        config = serving or fallback
    else:
        raise LaminarError(error_codes.MODEL_MISMATCH, f"{directory} has no {CONFIG_FILE} and the engine was started without --config", {"path": model_path})
    assert config is not None
    if serving is not None and config != serving:
        raise LaminarError(
            error_codes.MODEL_MISMATCH,
            f"{directory / CONFIG_FILE} describes another model: {_describe_difference(config, serving)}",
            {"path": model_path},
        )
    declared = (directory / CONFIG_FILE).exists() and is_fp8_config(json.loads((directory / CONFIG_FILE).read_text()))
    if declared or has_fp8_tensors(directory / WEIGHTS_FILE):
        state_dict = load_fp8_state_dict(directory / WEIGHTS_FILE)
        validate_state_dict(state_dict, config)
    else:
        state_dict = load_state_dict_file(directory / WEIGHTS_FILE, config)
    model = TinyLM(config)
    model.load_state_dict(state_dict, strict=True)
    return model.eval(), config


def random_model(config: TinyLMConfig, seed: int) -> TinyLM:
    """A TinyLM with seeded random weights (`--random-init`)."""
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        return TinyLM(config).eval()
    finally:
        torch.random.set_rng_state(generator_state)
