"""A rollout in plain Python, to run the example without the TypeScript rollout agent and an
inference engine: takes the newest version from the relay, samples groups of responses to digits
prompts with the TinyLM in process (rollout_sim.py), and writes them into the experience buffer
with the version that generated them, their reward and their logprobs.

    .venv/bin/python python/examples/grpo_digits/rollout_loop.py --nats nats://127.0.0.1:4222 --until-version 150

It reads the model's shape from the version directory's config.json (relay ``--engine-files``),
else from ``--config``. With ``--lora-model`` (a trainer run with ``--lora-rank``) the versions are
LoRA adapters of ``--model``'s first version: each is read in PEFT's layout and merged into the
base's weights, which computes what an engine serving the adapter does. A whole job uses ``laminar rollout-agent`` and engines instead; this loop
is the smallest thing that closes the loop (and what the example's README measured with).
Stops at ``--until-version``, or on SIGTERM/SIGINT after the round in progress.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see trainer.py

import argparse
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_setup import DEFAULT_PRESET, PRESETS, resolve_config
from rollout_sim import sample_groups

import laminar
from laminar.data import SyncExperienceWriter
from laminar import error_codes
from laminar.errors import LaminarError
from laminar.testing import TinyLM, load_config
from laminar.testing.digits import TASKS, random_prompts
from laminar.testing.lora import merged_state_dict, read_lora_adapter


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="A Python rollout for the GRPO digits example: newest weights from the relay, groups into the buffer.")
    p.add_argument("--relay-socket", help="the relay's unix socket (default: $LAMINAR_RELAY_SOCKET, else /dev/shm/laminar/relay.sock)")
    p.add_argument("--nats", default="nats://127.0.0.1:4222", help="NATS of the experience buffer (default %(default)s)")
    p.add_argument("--buffer", default="default", help="experience buffer name (default %(default)s)")
    p.add_argument("--model", default="digits/tiny", help="model name (default %(default)s)")
    p.add_argument("--config", default=DEFAULT_PRESET, help=f"model size when the version directory has no config.json: {', '.join(PRESETS)} or a path")
    p.add_argument("--group-size", type=int, default=8, help="samples per prompt (default %(default)s)")
    p.add_argument("--groups", type=int, default=2, help="prompts per round, between two looks for a newer version (default %(default)s)")
    p.add_argument("--min-digits", type=int, default=3, help="shortest digit string (default %(default)s)")
    p.add_argument("--max-digits", type=int, default=3, help="longest digit string (default %(default)s)")
    p.add_argument("--tasks", default="repeat", help=f"comma-separated, among {','.join(TASKS)} (default %(default)s)")
    p.add_argument("--seed", type=int, default=1, help="seed of the prompts and the sampling (default %(default)s)")
    p.add_argument("--lora-model", help="follow the LoRA adapter versions of this model (trainer.py --lora-rank's --lora-model) on --model's base")
    p.add_argument("--until-version", type=int, help="stop once the relay holds this version")
    p.add_argument("--wait", type=float, default=120.0, help="seconds to wait for a first version (default %(default)s)")
    args = p.parse_args(argv)
    if args.group_size < 1 or args.groups < 1:
        p.error("--group-size and --groups must be >= 1")
    return args


def records(samples: list[Any], version: int, round_id: str, group_size: int) -> list[dict[str, Any]]:
    """The samples of a round as buffer records (group ids unique to the round)."""
    now = time.time() * 1000.0
    out = []
    for i, s in enumerate(samples):
        group = f"{round_id}-{s.group_id}"
        out.append(
            {
                "id": f"{group}-{i % group_size}",
                "promptId": group,
                "groupId": group,
                "sampleIndex": i % group_size,
                "groupSize": group_size,
                "weightVersion": version,
                "reward": s.reward,
                "tokens": s.tokens,
                "logprobs": s.logprobs,
                "promptLength": s.prompt_length,
                "responseLength": len(s.tokens) - s.prompt_length,
                "completedAt": now,
            }
        )
    return out


def take_adapter(relay: laminar.RelayClient, name: str, base: TinyLM, model: TinyLM, version: int) -> int:
    """The newest adapter version of ``name`` merged into ``model`` (from ``base``) when it is newer
    than ``version``; the version ``model`` holds."""
    try:
        lease = relay.acquire(name, timeout=0.0)
    except LaminarError as err:
        if err.code in (error_codes.UNKNOWN_MODEL, error_codes.UNKNOWN_VERSION):
            return version  # no adapter yet: the base serves
        raise
    with lease:
        if lease.version > version and lease.dir is not None:
            model.load_state_dict(merged_state_dict(base, read_lora_adapter(lease.dir, base)))
            return lease.version
    return version


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    prompts = random_prompts(sys.maxsize, args.seed, args.min_digits, args.max_digits, [t for t in args.tasks.split(",") if t])
    generator = torch.Generator().manual_seed(args.seed)
    model: Optional[TinyLM] = None
    base: Optional[TinyLM] = None
    """With --lora-model: the base weights the adapters are merged into."""
    version = -1
    rounds = 0
    try:
        with laminar.RelayClient(args.relay_socket, name="grpo-digits-rollout") as relay, SyncExperienceWriter.connect(args.nats, args.buffer) as writer:
            while not stop.is_set():
                with relay.acquire(args.model, timeout=args.wait if model is None else 0.0) as lease:
                    if lease.version != version and (model is None or not args.lora_model):
                        if model is None:
                            has_config = lease.dir is not None and os.path.exists(os.path.join(lease.dir, "config.json"))
                            model = TinyLM(load_config(lease.dir) if has_config else resolve_config(args.config))
                            base = TinyLM(model.config)
                        model.load_state_dict(lease.torch())  # copied out: the lease can go
                        base.load_state_dict(model.state_dict())
                        version = lease.version
                if args.lora_model:
                    assert base is not None and model is not None
                    version = take_adapter(relay, args.lora_model, base, model, version)
                if args.until_version is not None and version >= args.until_version:
                    break
                samples = sample_groups(model, [next(prompts) for _ in range(args.groups)], args.group_size, generator)
                writer.write_many(records(samples, version, f"s{args.seed}r{rounds}", args.group_size))
                rounds += 1
    except LaminarError as err:
        print(f"rollout failed: {err.code}: {err.message}", file=sys.stderr)
        return 1
    print(f"rollout: {rounds} rounds, {rounds * args.groups * args.group_size} trajectories, last version {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
