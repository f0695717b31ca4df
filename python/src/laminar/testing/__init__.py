"""Test and demo tools that run real models on the CPU.

- `laminar.testing.model`: TinyLM, a small causal transformer (training forward, KV-cache
  generation), saved and loaded as a model directory (`config.json` + `model.safetensors`);
- `laminar.testing.digits`: the digits task (reverse/repeat a digit string), its vocabulary,
  prompts and reward;
- `laminar.testing.tools`: the lookup task (the answer must be fetched with a tool call), its
  vocabulary (the digits' plus the tool protocol's ids), prompts, tool and reward;
- `laminar.testing.lora`: LoRA adapters of a TinyLM in PEFT's layout (written by a trainer, read
  and applied by the reference engine), and a trainable `LoraAdapter`;
- `laminar.testing.engine`: the reference inference engine, serving the SGLang HTTP subset of
  docs/reference/engine-http.md (`python -m laminar.testing.engine`).

Importing this package imports torch (the model); `laminar` itself does not.
"""

from .model import (
    KVCache,
    TinyLM,
    TinyLMConfig,
    expected_shapes,
    load_config,
    load_model,
    load_state_dict_file,
    parameter_count,
    save_model,
    validate_state_dict,
)

__all__ = [
    "KVCache",
    "TinyLM",
    "TinyLMConfig",
    "expected_shapes",
    "load_config",
    "load_model",
    "load_state_dict_file",
    "parameter_count",
    "save_model",
    "validate_state_dict",
]
