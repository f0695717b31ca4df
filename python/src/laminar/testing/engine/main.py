"""The engine process: options, initial weights, the batching loop and the HTTP server, signals."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Optional, Sequence

import torch

from ... import error_codes
from ...errors import LaminarError
from ..model import TinyLMConfig
from .options import EngineOptions, parse_options
from .scheduler import Scheduler
from .server import EngineServer, serve
from .weights import load_weights, random_model

log = logging.getLogger("laminar.testing.engine")


def _fallback_config(options: EngineOptions) -> Optional[TinyLMConfig]:
    if options.config_path is None:
        return TinyLMConfig() if options.random_init else None
    try:
        return TinyLMConfig.from_json(json.loads(Path(options.config_path).read_text()))
    except (OSError, ValueError) as err:
        raise LaminarError(error_codes.INVALID_ARG, f"--config {options.config_path}: {err}") from err


def build_scheduler(options: EngineOptions) -> Scheduler:
    """The scheduler with its initial weights (--model-path, --random-init, or none)."""
    fallback = _fallback_config(options)
    scheduler = Scheduler(
        options.kv_capacity,
        options.max_running,
        options.eos_token_id,
        options.seed,
        fallback,
        priority_scheduling=options.enable_priority_scheduling,
        prefix_cache=not options.disable_radix_cache,
        preemption_threshold=None if options.disable_priority_preemption else options.priority_scheduling_preemption_threshold,
    )
    if options.model_path is not None:
        model, config = load_weights(options.model_path, None, fallback)
        scheduler.install(model, config, options.model_path, options.weight_version)
    elif options.random_init:
        assert fallback is not None
        scheduler.install(random_model(fallback, options.seed), fallback, None, options.weight_version)
    return scheduler


async def run(options: EngineOptions, stop: Optional[asyncio.Event] = None, ready: Optional[asyncio.Event] = None) -> int:
    """Serves until `stop` is set (or SIGTERM/SIGINT when `stop` is None); returns the port it used."""
    scheduler = build_scheduler(options)
    if scheduler.config is not None and not 0 <= options.eos_token_id < scheduler.config.vocab_size:
        raise LaminarError(error_codes.INVALID_ARG, f"--eos-token-id {options.eos_token_id} is outside the vocabulary [0, {scheduler.config.vocab_size})")
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    batching = asyncio.ensure_future(scheduler.run())
    try:
        return await serve(EngineServer(scheduler, options), options.host, options.port, stop, ready)
    finally:
        batching.cancel()
        try:
            await batching
        except asyncio.CancelledError:
            pass


def main(argv: Optional[Sequence[str]] = None) -> int:
    options = parse_options(argv)
    logging.basicConfig(level=options.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if options.threads is not None:
        torch.set_num_threads(options.threads)
    try:
        asyncio.run(run(options))
    except LaminarError as err:
        print(f"laminar.testing.engine: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the port is taken, the host cannot be bound
        print(f"laminar.testing.engine: {err}", file=sys.stderr)
        return 1
    log.info("engine stopped")
    return 0
