"""Publishes TinyLM versions into a relay: the weights tests, benchmarks and the demo start from.

    python -m laminar.testing.publish --socket /dev/shm/laminar/relay.sock --model digits/tiny \\
        --versions 0 [1 2 ...] [--config '{"d_model": 64}'] [--seed 1] [--config-dir DIR]

Each version is a TinyLM initialised from ``seed + version`` (so two runs publish the same
bytes), published through the relay's local protocol. ``--config-dir`` writes the model's
``config.json`` there: give that directory to the relay as ``--engine-files`` so that every
version directory is a complete model directory an engine loads from.

``--break missing:NAME`` leaves tensor NAME out of the version and ``--break shape:NAME``
publishes it with one row too many: versions an engine must refuse (tests of that path).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional, Sequence

import torch

from ..relay import RelayClient
from .model import CONFIG_FILE, TinyLM, TinyLMConfig


def tiny_state_dict(config: TinyLMConfig, seed: int) -> dict[str, torch.Tensor]:
    """The parameters of a TinyLM initialised from ``seed``."""
    torch.manual_seed(seed)
    return {name: t.detach().contiguous() for name, t in TinyLM(config).state_dict().items()}


def broken(state: dict[str, torch.Tensor], how: str) -> dict[str, torch.Tensor]:
    """``state`` with one tensor left out (``missing:NAME``) or grown by a row (``shape:NAME``)."""
    kind, _, name = how.partition(":")
    if name not in state:
        raise SystemExit(f"--break {how}: no tensor {name!r} (tensors: {', '.join(sorted(state))})")
    out = dict(state)
    if kind == "missing":
        del out[name]
    elif kind == "shape":
        t = out[name]
        out[name] = torch.cat([t, t[:1]]) if t.dim() > 0 else t.reshape(1)
    else:
        raise SystemExit(f"--break must be missing:NAME or shape:NAME, got {how!r}")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m laminar.testing.publish", description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", help="the relay's socket (needed when --versions are given)")
    parser.add_argument("--model", default="digits/tiny", help="model name in the relay (default %(default)s)")
    parser.add_argument("--versions", type=int, nargs="*", default=[], help="versions to publish, in order (none: only write --config-dir)")
    parser.add_argument("--config", default="{}", help="TinyLMConfig fields as JSON (default: the digits model)")
    parser.add_argument("--seed", type=int, default=1, help="version v is initialised from seed + v")
    parser.add_argument("--config-dir", help="write config.json here (the relay's --engine-files)")
    parser.add_argument("--break", dest="break_", help="publish a version an engine must refuse: missing:NAME or shape:NAME")
    args = parser.parse_args(argv)
    config = TinyLMConfig(**json.loads(args.config))
    if args.config_dir:
        Path(args.config_dir).mkdir(parents=True, exist_ok=True)
        (Path(args.config_dir) / CONFIG_FILE).write_text(json.dumps(config.to_json(), indent=2) + "\n")
    if not args.versions:
        return 0
    if not args.socket:
        parser.error("--socket is needed to publish --versions")
    with RelayClient(args.socket, name="laminar.testing.publish") as relay:
        for version in args.versions:
            state = tiny_state_dict(config, args.seed + version)
            if args.break_:
                state = broken(state, args.break_)
            # Whoever reads this line goes on to use the version: it is printed once served.
            served = relay.publish(args.model, version, state).wait_visible()
            print(json.dumps({"version": version, "dir": served.get("dir"), "bytes": served.get("bytes")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
