"""laminar's reference inference engine: TinyLM on the CPU behind SGLang's HTTP API.

    python -m laminar.testing.engine --port 30000 --model-path <dir> [--kv-capacity 4096] [--max-running 16]

It serves the subset of SGLang's HTTP API that laminar's rollout agent uses, with the same JSON and
streaming framing (docs/reference/engine-http.md), so that the agent's SGLang mode runs unchanged
against it: `/generate` (streamed, seeded sampling, logprobs), `/abort_request`,
`/pause_generation`, `/continue_generation`, `/update_weights_from_disk`, `/get_weight_version`,
`/health`, `/health_generate`, `/get_model_info`, `/get_server_info`, `/tokenize`, `/metrics`,
and LoRA adapters (`/load_lora_adapter`, `/unload_lora_adapter`, `lora_path` on `/generate`).
Continuous batching with a KV capacity in tokens (scheduler.py); weights from a model directory
read with the safetensors library and validated strictly (weights.py). docs/components/
reference-engine.md says how to run it and what it does not do.
"""

from .main import main, run
from .options import EngineOptions, parse_options

__all__ = ["EngineOptions", "main", "parse_options", "run"]
