"""A tiny random Llama for the real-engine tier (test/engines/) and the engine bench, made locally with transformers:
no hub download. Run with the real-engine environment's Python (.venv-engines/bin/python).

    tiny_llama.py make DIR --seed S          config, tokenizer, generation config, model.safetensors
    tiny_llama.py make DIR --seed S --version DST:SEED[:BREAK] ...
                                            and versions: DIR's weights moved by seeded noise (a
                                            "trained" version) written as DST/model.safetensors;
                                            BREAK (missing, misshaped, dtype) makes one vLLM must refuse
    tiny_llama.py logprobs DIR...           reads {"prompt": [...], "tokens": [...]} on stdin and
                                            prints, for each DIR, the logprob of each token given the
                                            prompt and the tokens before it: a reference forward pass
                                            (float64)

One process does all of a step (torch and transformers take seconds to import on a loaded machine).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

# Small enough to start in seconds and generate at hundreds of tokens per second on one core,
# big enough that vLLM's CPU path repacks its linear layers as it does for real models.
CONFIG = dict(
    vocab_size=512,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)


def make(directory: str, seed: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    config = LlamaConfig(**CONFIG, torch_dtype="float32")
    model = LlamaForCausalLM(config).to(torch.float32)
    # Wider than transformers' default init (std 0.02): distributions far from uniform, so that a
    # version that did not load shows in the logprobs.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() > 1:
                param.normal_(0.0, 0.2 if "embed" in name or "lm_head" in name else 0.08)
    os.makedirs(directory, exist_ok=True)
    model.save_pretrained(directory, safe_serialization=True)
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"t{i}": i for i in range(3, CONFIG["vocab_size"])}}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<pad>")
    fast.save_pretrained(directory)


def version(source: str, destination: str, seed: int, broken: str | None) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(os.path.join(source, "model.safetensors"))
    generator = torch.Generator().manual_seed(seed)
    moved = {name: t + 0.05 * t.std() * torch.randn(t.shape, generator=generator, dtype=t.dtype) if t.dim() > 1 else t.clone() for name, t in tensors.items()}
    if broken == "missing":
        del moved["model.layers.1.mlp.down_proj.weight"]
    elif broken == "misshaped":
        moved["model.layers.1.self_attn.o_proj.weight"] = torch.zeros(CONFIG["hidden_size"], CONFIG["hidden_size"] // 2)
    elif broken == "dtype":
        moved["model.layers.0.mlp.up_proj.weight"] = moved["model.layers.0.mlp.up_proj.weight"].to(torch.bfloat16)
    elif broken is not None:
        raise SystemExit(f"unknown --break {broken}")
    os.makedirs(destination, exist_ok=True)
    save_file(moved, os.path.join(destination, "model.safetensors"), metadata={"format": "pt"})


def logprobs(directories: list[str]) -> None:
    from transformers import LlamaForCausalLM

    request = json.load(sys.stdin)
    prompt, tokens = list(request["prompt"]), list(request["tokens"])
    ids = torch.tensor([prompt + tokens])
    out: dict[str, list[float]] = {}
    for directory in directories:
        model = LlamaForCausalLM.from_pretrained(directory, dtype=torch.float64).eval()
        with torch.no_grad():
            log_softmax = torch.log_softmax(model(ids).logits[0], dim=-1)
        out[directory] = [float(log_softmax[len(prompt) - 1 + i, token]) for i, token in enumerate(tokens)]
    json.dump(out, sys.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make")
    p.add_argument("directory")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--version", action="append", default=[], help="DST:SEED[:BREAK]")
    p = sub.add_parser("logprobs")
    p.add_argument("directories", nargs="+")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.command == "make":
        make(args.directory, args.seed)
        for spec in args.version:
            destination, seed, *broken = spec.split(":")
            version(args.directory, destination, int(seed), broken[0] if broken else None)
    else:
        logprobs(args.directories)


if __name__ == "__main__":
    main()
