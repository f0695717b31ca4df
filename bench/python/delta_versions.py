"""Consecutive bf16 weight versions from real GRPO training, for the delta bench (bench/delta.ts).

    .venv/bin/python bench/python/delta_versions.py --out DIR [--lrs 1e-6,1e-5,1e-3] [--steps 6]
        [--config default] [--seed 0]

Trains the GRPO digits example's policy (python/examples/grpo_digits: its sampling, loss and
update, Adam over float32 master weights, as offline_check.py runs them) at each learning rate
from the same initial weights, and after every step writes the weights as a trainer publishing
bf16 sends them: each tensor cast to bfloat16, the tensors' bytes one after the other in the
state dict's order (the data section of a version's segment). Files:

    DIR/manifest.json                      {"config", "params", "bytes", "runs": [{"lr", "dir", "versions"}]}
    DIR/lr<lr>/v<k>.bin                    version k (v0: the initial weights)

Prints one JSON line (the manifest) on stdout.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import copy  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "src"))
sys.path.insert(0, str(ROOT / "python" / "examples" / "grpo_digits"))

import torch  # noqa: E402
from grpo_update import UpdateOptions, grpo_step  # noqa: E402
from model_setup import build_model, resolve_config  # noqa: E402
from rollout_sim import sample_groups  # noqa: E402
from training_batch import TrainingBatch  # noqa: E402

from laminar.testing.digits import random_prompts  # noqa: E402


def bf16_bytes(model: torch.nn.Module) -> bytes:
    """The state dict as bf16, tensor after tensor: what a bf16 publish puts in the segment."""
    parts = []
    for tensor in model.state_dict().values():
        parts.append(tensor.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes())
    return b"".join(parts)


def train(config_name: str, lr: float, steps: int, seed: int, out: Path) -> int:
    """Writes versions 0..steps of one run into `out`; returns how many it wrote."""
    config = resolve_config(config_name)
    model = build_model(config, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    options = UpdateOptions()
    prompts = random_prompts(steps * 8, seed, 3, 3, ["repeat"])
    generator = torch.Generator().manual_seed(seed)
    behaviour = copy.deepcopy(model)
    out.mkdir(parents=True, exist_ok=True)
    (out / "v0.bin").write_bytes(bf16_bytes(model))
    for step in range(1, steps + 1):
        behaviour.load_state_dict(model.state_dict())
        samples = sample_groups(behaviour, [next(prompts) for _ in range(8)], 8, generator, group_prefix=f"s{step}g")
        batch = TrainingBatch.build(
            sequences=[s.tokens for s in samples],
            logprobs=[s.logprobs for s in samples],
            prompt_lengths=[s.prompt_length for s in samples],
            rewards=[s.reward for s in samples],
            group_ids=[s.group_id for s in samples],
            weight_versions=[step - 1] * len(samples),
        )
        grpo_step(model, optimizer, batch, options, None)
        (out / f"v{step}.bin").write_bytes(bf16_bytes(model))
    return steps + 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory to write the versions into")
    p.add_argument("--lrs", default="1e-6,1e-5,1e-3", help="Adam learning rates, comma-separated (default %(default)s; 1e-3 is the example's)")
    p.add_argument("--steps", type=int, default=6, help="GRPO steps per learning rate (default %(default)s)")
    p.add_argument("--config", default="default", help="the example's model size (default %(default)s: TinyLM's 3.2 M parameters)")
    p.add_argument("--seed", type=int, default=0, help="seed of the model, prompts and sampling (default %(default)s)")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be >= 1")
    torch.set_num_threads(1)
    out = Path(args.out)
    runs = []
    for lr in [float(x) for x in args.lrs.split(",") if x]:
        directory = f"lr{lr:g}"
        versions = train(args.config, lr, args.steps, args.seed, out / directory)
        runs.append({"lr": lr, "dir": directory, "versions": versions})
    model = build_model(resolve_config(args.config), args.seed)
    manifest = {
        "config": args.config,
        "params": sum(t.numel() for t in model.state_dict().values()),
        "bytes": len(bf16_bytes(model)),
        "runs": runs,
    }
    (out / "manifest.json").write_text(json.dumps(manifest))
    print(json.dumps(manifest), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
