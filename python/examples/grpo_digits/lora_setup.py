"""``--lora-rank R``: train a LoRA adapter on a frozen base instead of every weight. Shared by the
trainer and the offline check.

The base is the seeded TinyLM (``--config``, ``--seed``) and stays as it was; only the adapter's
A and B on ``--lora-targets`` (every linear layer, the output head included, by default) are optimised, and
each step's adapter is what a version is: a directory in PEFT's layout
(``laminar.testing.lora``), which SGLang's ``/load_lora_adapter``, vLLM's and the reference
engine's load. A LoRA adapter wants a larger learning rate than full fine-tuning: ``--lr`` defaults
to ``DEFAULT_LORA_LR`` with ``--lora-rank``.
"""

from __future__ import annotations

import argparse
from typing import Optional

import torch

from laminar.testing import TinyLM
from laminar.testing.lora import DEFAULT_TARGET_MODULES, LoraConfig, LoraModel

DEFAULT_LORA_LR = 3e-3
"""Measured with offline_check.py (README.md, "LoRA"): 1e-3 learns a fraction as fast, 1e-2 and
5e-3 rise and then fall back."""

DEFAULT_TARGETS = (*DEFAULT_TARGET_MODULES, "lm_head")
"""Without the output head an adapter on this random-init base hardly learns (README.md, "LoRA")."""


def add_lora_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("LoRA (train an adapter on a frozen base)")
    group.add_argument("--lora-rank", type=int, default=0, help="train a LoRA adapter of this rank instead of every weight (default 0: off)")
    group.add_argument("--lora-alpha", type=float, help="LoRA alpha: the adapter's output is scaled by alpha / rank (default: the rank, a scale of 1)")
    group.add_argument(
        "--lora-targets",
        default=",".join(DEFAULT_TARGETS),
        help="comma-separated module names the adapter applies to, matched as PEFT's target_modules (default %(default)s)",
    )


def lora_config(args: argparse.Namespace, parser: argparse.ArgumentParser, base_name: str) -> Optional[LoraConfig]:
    """The adapter's config from the flags (None without ``--lora-rank``); bad values are parser errors."""
    if args.lora_rank < 0:
        parser.error("--lora-rank must be >= 0")
    if not args.lora_rank:
        if args.lora_alpha is not None:
            parser.error("--lora-alpha needs --lora-rank")
        return None
    alpha = args.lora_alpha if args.lora_alpha is not None else float(args.lora_rank)
    if not alpha > 0:
        parser.error("--lora-alpha must be > 0")
    targets = tuple(t for t in args.lora_targets.split(",") if t)
    if not targets:
        parser.error("--lora-targets names no module")
    return LoraConfig(r=args.lora_rank, lora_alpha=alpha, target_modules=targets, base_model_name_or_path=base_name)


def lora_policy(model: torch.nn.Module, config: LoraConfig) -> LoraModel:
    """The frozen ``model`` with a fresh adapter (the adapted model starts equal to it)."""
    if not isinstance(model, TinyLM):
        raise SystemExit("--lora-rank trains TinyLM configs only (not --config llama)")
    return LoraModel(model, config)
