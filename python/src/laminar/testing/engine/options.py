"""Command-line options of `python -m laminar.testing.engine`, parsed once into a frozen object."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Optional, Sequence

from ..digits import EOS

DEFAULT_PORT = 30000
"""SGLang's default port."""
DEFAULT_KV_CAPACITY = 4096
DEFAULT_MAX_RUNNING = 16
DEFAULT_SERVED_MODEL_NAME = "laminar-tinylm"
DEFAULT_MAX_LORAS = 4
"""Most LoRA adapters loaded at once (SGLang's --max-loaded-loras)."""
DEFAULT_PREEMPTION_THRESHOLD = 10
"""SGLang's --priority-scheduling-preemption-threshold default: the least priority difference that preempts."""
DEFAULT_WEIGHT_VERSION = "default"
"""SGLang's `--weight-version` default."""


@dataclass(frozen=True)
class EngineOptions:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    model_path: Optional[str] = None
    random_init: bool = False
    config_path: Optional[str] = None
    kv_capacity: int = DEFAULT_KV_CAPACITY
    max_running: int = DEFAULT_MAX_RUNNING
    seed: int = 0
    weight_version: str = DEFAULT_WEIGHT_VERSION
    served_model_name: str = DEFAULT_SERVED_MODEL_NAME
    eos_token_id: int = EOS
    threads: Optional[int] = None
    log_level: str = "info"
    enable_priority_scheduling: bool = False
    priority_scheduling_preemption_threshold: int = DEFAULT_PREEMPTION_THRESHOLD
    disable_priority_preemption: bool = False
    disable_radix_cache: bool = False
    max_loras: int = DEFAULT_MAX_LORAS
    stream_interval: int = 1


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be in 0..65535 (0: any free port), got {text}")
    return value


def parse_options(argv: Optional[Sequence[str]] = None) -> EngineOptions:
    parser = argparse.ArgumentParser(
        prog="python -m laminar.testing.engine",
        description="laminar's reference inference engine: TinyLM on the CPU behind the SGLang HTTP subset of docs/reference/engine-http.md.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one, printed on the ready line)")
    parser.add_argument("--model-path", help="a model directory (config.json + model.safetensors) to serve from the start")
    parser.add_argument("--random-init", action="store_true", help="start with seeded random weights (of --config, or the default TinyLMConfig)")
    parser.add_argument("--config", dest="config_path", help="a config.json: the model of --random-init, or assumed for directories without config.json")
    parser.add_argument(
        "--kv-capacity",
        type=_positive,
        default=DEFAULT_KV_CAPACITY,
        help=f"KV cache capacity in tokens (max_total_num_tokens; default {DEFAULT_KV_CAPACITY})",
    )
    parser.add_argument(
        "--max-running",
        type=_positive,
        default=DEFAULT_MAX_RUNNING,
        help=f"most sequences decoded together (max_running_requests; default {DEFAULT_MAX_RUNNING})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of --random-init and of the sampling of requests without sampling_seed")
    parser.add_argument("--weight-version", default=DEFAULT_WEIGHT_VERSION, help="weight version label of the initial weights (default 'default')")
    parser.add_argument("--served-model-name", default=DEFAULT_SERVED_MODEL_NAME, help="model_name label of the metrics")
    parser.add_argument("--eos-token-id", type=int, default=EOS, help=f"the token that ends a response unless ignore_eos (default {EOS}, digits' EOS)")
    parser.add_argument(
        "--enable-priority-scheduling",
        action="store_true",
        help="admit waiting requests by their `priority` (larger first, first come first served among equals) instead of FCFS, as SGLang",
    )
    parser.add_argument(
        "--priority-scheduling-preemption-threshold",
        type=_non_negative,
        default=DEFAULT_PREEMPTION_THRESHOLD,
        help=(
            "with priority scheduling, a waiting request that finds no slot or room retracts running ones"
            f" whose priority is lower by more than this (SGLang's flag; default {DEFAULT_PREEMPTION_THRESHOLD})"
        ),
    )
    parser.add_argument(
        "--disable-priority-preemption",
        action="store_true",
        help="with priority scheduling, never retract running requests for a waiting one (the order of admission only)",
    )
    parser.add_argument(
        "--max-loras",
        type=_positive,
        default=DEFAULT_MAX_LORAS,
        help=f"most LoRA adapters loaded at once (/load_lora_adapter; SGLang's --max-loaded-loras; default {DEFAULT_MAX_LORAS})",
    )
    parser.add_argument(
        "--disable-radix-cache",
        action="store_true",
        help="no prefix cache: every request prefills its whole prompt (SGLang's flag; by default finished sequences' KV is kept and reused)",
    )
    parser.add_argument(
        "--stream-interval",
        type=_positive,
        default=1,
        help="a streamed response's chunk every this many tokens, the first token and the last always (SGLang's flag; default 1)",
    )
    parser.add_argument("--threads", type=_positive, help="torch CPU threads (default: torch's)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    if args.random_init and args.model_path:
        parser.error("--random-init and --model-path exclude each other")
    return EngineOptions(**vars(args))
