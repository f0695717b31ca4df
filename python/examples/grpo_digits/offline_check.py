"""The GRPO step of trainer.py without laminar: sample groups from the current policy on the
digits task in process, reward them, step. A sanity check of the loss (the mean reward must rise)
and the place to tune the example's defaults before a whole job runs them.

    .venv/bin/python python/examples/grpo_digits/offline_check.py --steps 150
    .venv/bin/python python/examples/grpo_digits/offline_check.py --lag 2     # behaviour policy 2 versions old

``--lag K`` generates each batch with the weights of K steps ago, as an asynchronous job's engines
do, so the importance ratio and its clip have work to do. Prints one line per ``--log-every``
steps and, with ``--metrics-out``, writes the trainer's JSONL fields that apply (plot.py reads
both). Exits 0 when the mean reward of the last tenth of the steps is at least ``--expect`` (when
given).
"""

from __future__ import annotations

import os

# Before numpy and torch load it: Debian's OpenBLAS (numpy's and torch's BLAS here) otherwise
# starts a thread per core that spins between calls; torch.set_num_threads (--threads) does not
# reach it. On the demo's 2 cores that cost ~40% more CPU, in system time. Set the variable to
# allow more.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import collections
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from grpo_update import UpdateOptions, grpo_step
from lora_setup import DEFAULT_LORA_LR, add_lora_arguments, lora_config, lora_policy
from model_setup import DEFAULT_PRESET, PRESETS, build_model, resolve_config
from rollout_sim import sample_groups
from training_batch import TrainingBatch

from laminar.testing.digits import TASKS, random_prompts
from laminar.testing.lora import LoraModel

DEFAULTS = {"steps": 150, "lr": 1e-3, "group_size": 8, "batch_groups": 8, "min_digits": 3, "max_digits": 3, "tasks": "repeat"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=DEFAULTS["steps"], help="GRPO steps (default %(default)s)")
    p.add_argument("--config", default=DEFAULT_PRESET, help=f"model size: {', '.join(PRESETS)}, or a config.json (default %(default)s)")
    p.add_argument("--lr", type=float, help=f"Adam learning rate (default {DEFAULTS['lr']}; {DEFAULT_LORA_LR} with --lora-rank)")
    p.add_argument("--clip", type=float, default=0.2, help="PPO clip of the importance ratio (default %(default)s)")
    p.add_argument("--updates", type=int, default=4, help="optimiser updates per batch (default %(default)s)")
    p.add_argument("--kl-coef", type=float, default=0.0, help="KL to the initial policy (default %(default)s: off)")
    p.add_argument("--group-size", type=int, default=DEFAULTS["group_size"], help="samples per prompt (default %(default)s)")
    p.add_argument("--batch-groups", type=int, default=DEFAULTS["batch_groups"], help="groups per batch (default %(default)s)")
    p.add_argument("--min-digits", type=int, default=DEFAULTS["min_digits"], help="shortest digit string (default %(default)s)")
    p.add_argument("--max-digits", type=int, default=DEFAULTS["max_digits"], help="longest digit string (default %(default)s)")
    p.add_argument("--tasks", default=DEFAULTS["tasks"], help=f"comma-separated, among {','.join(TASKS)} (default %(default)s)")
    p.add_argument("--lag", type=int, default=0, help="generate with the policy of this many steps ago (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model, the prompts and the sampling (default %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default %(default)s)")
    p.add_argument("--log-every", type=int, default=10, help="print every N steps (default %(default)s)")
    p.add_argument("--metrics-out", help="JSONL file of one line per step (the trainer's fields that apply)")
    p.add_argument("--expect", type=float, help="fail (exit 1) unless the last tenth's mean reward reaches this")
    add_lora_arguments(p)
    args = p.parse_args(argv)
    args.lora = lora_config(args, p, "digits/offline-check")
    if args.lr is None:
        args.lr = DEFAULT_LORA_LR if args.lora else DEFAULTS["lr"]
    for name in ("steps", "updates", "group_size", "batch_groups", "threads", "log_every"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.lag < 0:
        p.error("--lag must be >= 0")
    return args


def served_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What an engine would serve of the policy now: its weights (a LoRA policy's merged)."""
    if isinstance(model, LoraModel):
        return model.merged_state_dict()
    return copy.deepcopy(model.state_dict())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    config = resolve_config(args.config)
    base = build_model(config, args.seed)
    behaviour = copy.deepcopy(base)
    reference = copy.deepcopy(base).eval() if args.kl_coef else None
    # With --lora-rank the policy is the frozen base plus an adapter, and only the adapter trains;
    # the engines' weights (the behaviour policy here) are the base with the adapter merged in,
    # which computes the same (python/tests/test_reference_engine_lora.py checks it on the engine).
    model = lora_policy(base, args.lora) if args.lora else base
    trainable = model.trainable_parameters() if args.lora else list(model.parameters())
    optimizer = torch.optim.Adam(trainable, lr=args.lr)
    options = UpdateOptions(clip=args.clip, updates=args.updates, kl_coef=args.kl_coef)
    tasks = [t for t in args.tasks.split(",") if t]
    prompts = random_prompts(args.steps * args.batch_groups, args.seed, args.min_digits, args.max_digits, tasks)
    generator = torch.Generator().manual_seed(args.seed)
    # Weights of the last `lag` versions: the behaviour policy is the oldest of them.
    history: collections.deque = collections.deque(maxlen=args.lag + 1)
    history.append(served_weights(model))
    metrics = open(args.metrics_out, "w") if args.metrics_out else None
    rewards_seen: list[float] = []
    started = time.monotonic()
    params = sum(p.numel() for p in trainable)
    what = f"LoRA r {args.lora.r} alpha {args.lora.lora_alpha:g} on {','.join(args.lora.target_modules)}, lr {args.lr:g}" if args.lora else f"lr {args.lr:g}"
    print(f"offline check: {params} trained parameters ({args.config}, {what}), tasks {args.tasks}, digits {args.min_digits}-{args.max_digits}, lag {args.lag}")
    for step in range(1, args.steps + 1):
        behaviour.load_state_dict(history[0])
        samples = sample_groups(behaviour, [next(prompts) for _ in range(args.batch_groups)], args.group_size, generator, group_prefix=f"s{step}g")
        batch = TrainingBatch.build(
            sequences=[s.tokens for s in samples],
            logprobs=[s.logprobs for s in samples],
            prompt_lengths=[s.prompt_length for s in samples],
            rewards=[s.reward for s in samples],
            group_ids=[s.group_id for s in samples],
            weight_versions=[max(step - 1 - args.lag, 0)] * len(samples),
        )
        stats = grpo_step(model, optimizer, batch, options, reference)
        history.append(served_weights(model))
        mean_reward = float(batch.rewards.mean())
        rewards_seen.append(mean_reward)
        elapsed = time.monotonic() - started
        if metrics:
            line = {"step": step, "version": step, "t": round(elapsed, 3), "reward_mean": round(mean_reward, 4), "loss": round(stats.loss, 5)}
            line.update({"clip_fraction": round(stats.clip_fraction, 4), "behaviour_kl": round(stats.behaviour_kl, 5)})
            # Every batch is generated exactly `lag` versions back and trained at once.
            line.update({"staleness_p50": float(args.lag), "staleness_max": args.lag, "inherent_p50": float(args.lag), "inherent_max": args.lag})
            metrics.write(json.dumps(line) + "\n")
        if step % args.log_every == 0 or step == 1 or step == args.steps:
            window = float(np.mean(rewards_seen[-args.log_every :]))
            print(
                f"step {step:4d}  reward {mean_reward:.3f}  (last {args.log_every}: {window:.3f})  loss {stats.loss:+.4f}  "
                f"clip {stats.clip_fraction:.3f}  {elapsed:6.1f}s",
                flush=True,
            )
    if metrics:
        metrics.close()
    tail = float(np.mean(rewards_seen[-max(1, args.steps // 10) :]))
    head = float(np.mean(rewards_seen[: max(1, args.steps // 10)]))
    print(f"mean reward: first tenth {head:.3f}, last tenth {tail:.3f}; {time.monotonic() - started:.1f}s")
    if args.expect is not None and tail < args.expect:
        print(f"FAILED: last tenth {tail:.3f} < --expect {args.expect}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
