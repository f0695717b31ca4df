"""TinyLM: a small causal transformer for laminar's tests, demo and reference engine.

Pre-norm blocks (LayerNorm → multi-head attention → residual, LayerNorm → MLP → residual), learned
absolute positions, an untied output head; float32 on the CPU. The default config has about 3.2
million parameters.

Two paths over the same parameters:
- `TinyLM.forward(input_ids, padding_mask=None)`: the whole sequence with a causal mask, for
  training; returns logits `[batch, time, vocab]`.
- `TinyLM.prefill(...)` and `TinyLM.decode(...)`: incremental generation with a `KVCache` of
  fixed slots, one slot per sequence: prefill writes a prompt's keys and values into its slot
  (from position 0, or after a prefix the slot already holds) and returns the logits of its last
  position; decode takes one new token for each of a batch of sequences of different lengths and
  returns their next-token logits; `TinyLM.extend(...)` does both in one forward for a batch whose
  rows each add their own number of tokens (the reference engine's mixed step: the requests it
  admits prefill beside the running ones' decodes).

The parameter names (`TinyLM.state_dict()` keys, listed by `expected_shapes`) are the wire format
between trainer and engine: a version directory holds them in `model.safetensors` (written and read
with the real `safetensors` library) next to a `config.json` like a Hugging Face model directory's:

    tok_emb.weight                         [vocab_size, d_model]
    pos_emb.weight                         [max_seq_len, d_model]
    layers.{i}.attn_norm.{weight,bias}     [d_model]
    layers.{i}.attn.qkv.weight             [3 * d_model, d_model]   (rows: q, then k, then v)
    layers.{i}.attn.qkv.bias               [3 * d_model]
    layers.{i}.attn.out.{weight,bias}      [d_model, d_model], [d_model]
    layers.{i}.mlp_norm.{weight,bias}      [d_model]
    layers.{i}.mlp.fc_in.{weight,bias}     [d_ff, d_model], [d_ff]
    layers.{i}.mlp.fc_out.{weight,bias}    [d_model, d_ff], [d_model]
    norm.{weight,bias}                     [d_model]
    lm_head.weight                         [vocab_size, d_model]

all float32. `load_state_dict_file` / `load_model` refuse (`ERR_MODEL_MISMATCH`) a file with a
tensor missing, unexpected, of another shape or another dtype.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from .. import error_codes
from ..errors import LaminarError

WEIGHTS_FILE = "model.safetensors"
"""The weights file of a model directory."""

CONFIG_FILE = "config.json"
"""The config file of a model directory."""

MODEL_TYPE = "laminar-tinylm"
"""`model_type` in config.json: what reads the directory checks it."""

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class TinyLMConfig:
    """The shape of a TinyLM. The defaults fit the digits task's vocabulary (16 ids)."""

    vocab_size: int = 16
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    max_seq_len: int = 64
    d_ff: int = 0
    """Hidden width of the MLP; 0 means 4 * d_model."""
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise LaminarError(error_codes.INVALID_ARG, f"TinyLMConfig.{name} must be a positive integer, got {value!r}")
        if not isinstance(self.d_ff, int) or isinstance(self.d_ff, bool) or self.d_ff < 0:
            raise LaminarError(error_codes.INVALID_ARG, f"TinyLMConfig.d_ff must be a non-negative integer, got {self.d_ff!r}")
        if self.d_model % self.n_heads != 0:
            raise LaminarError(error_codes.INVALID_ARG, f"TinyLMConfig.d_model ({self.d_model}) must be a multiple of n_heads ({self.n_heads})")
        if not isinstance(self.norm_eps, (int, float)) or not 0 < self.norm_eps < 1:
            raise LaminarError(error_codes.INVALID_ARG, f"TinyLMConfig.norm_eps must be in (0, 1), got {self.norm_eps!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ff_dim(self) -> int:
        return self.d_ff or 4 * self.d_model

    def to_json(self) -> dict[str, Any]:
        """The config.json object: the fields plus `model_type`."""
        return {"model_type": MODEL_TYPE, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "TinyLMConfig":
        """Reads a config.json object; unknown keys are refused (a typo must not pass silently)."""
        if not isinstance(obj, Mapping):
            raise LaminarError(error_codes.MODEL_MISMATCH, f"config.json must hold an object, got {type(obj).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        model_type = obj.get("model_type", MODEL_TYPE)
        if model_type != MODEL_TYPE:
            raise LaminarError(error_codes.MODEL_MISMATCH, f"config.json model_type is {model_type!r}, expected {MODEL_TYPE!r}")
        # quantization_config: an FP8 variant's config.json (its weights are dequantised at load).
        unknown = sorted(set(obj) - fields - {"model_type", "quantization_config"})
        if unknown:
            raise LaminarError(error_codes.MODEL_MISMATCH, f"config.json has unknown keys: {', '.join(unknown)}")
        try:
            return cls(**{k: v for k, v in obj.items() if k in fields})
        except LaminarError as err:
            raise LaminarError(error_codes.MODEL_MISMATCH, f"config.json: {err.message}") from err


class Attention(nn.Module):
    """Multi-head causal self-attention with one fused q/k/v projection."""

    def __init__(self, config: TinyLMConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.head_dim = config.head_dim
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)

    def _split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[B, T, 3D] → q, k, v, each [B, H, T, Dh]."""
        b, t, _ = x.shape
        qkv = self.qkv(x).view(b, t, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return qkv[0], qkv[1], qkv[2]

    def _merge(self, y: torch.Tensor) -> torch.Tensor:
        """[B, H, T, Dh] → [B, T, D] through the output projection."""
        b, _, t, _ = y.shape
        return self.out(y.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))

    @staticmethod
    def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """Softmax attention; `allowed` broadcasts to [B, H, Tq, Tk], True where a query may see a key."""
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~allowed, float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)

    def forward(self, x: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(x)
        return self._merge(self._attend(q, k, v, allowed))

    def prefill(self, x: torch.Tensor, k_slot: torch.Tensor, v_slot: torch.Tensor, allowed: torch.Tensor, start: int = 0) -> torch.Tensor:
        """One sequence's tokens [1, T, D] at positions start .. start + T - 1: their keys and values
        go into the slot views [H, L, Dh], whose positions 0 .. start - 1 already hold the prefix's
        (a prefix cache hit); `allowed` is [1, 1, T, start + T]."""
        q, k, v = self._split(x)
        end = start + x.shape[1]
        k_slot[:, start:end] = k[0]
        v_slot[:, start:end] = v[0]
        if start == 0:
            return self._merge(self._attend(q, k, v, allowed))
        return self._merge(self._attend(q, k_slot[:, :end].unsqueeze(0), v_slot[:, :end].unsqueeze(0), allowed))

    def decode(self, x: torch.Tensor, k_layer: torch.Tensor, v_layer: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One new token per sequence, x [B, 1, D] at `positions` [B] of `slots` [B]."""
        q, k, v = self._split(x)
        k_layer[slots, :, positions] = k[:, :, 0]
        v_layer[slots, :, positions] = v[:, :, 0]
        span = int(positions.max()) + 1
        keys = k_layer[slots, :, :span]
        values = v_layer[slots, :, :span]
        allowed = (torch.arange(span).view(1, span) <= positions.view(-1, 1)).view(-1, 1, 1, span)
        return self._merge(self._attend(q, keys, values, allowed))


class MLP(nn.Module):
    def __init__(self, config: TinyLMConfig) -> None:
        super().__init__()
        self.fc_in = nn.Linear(config.d_model, config.ff_dim)
        self.fc_out = nn.Linear(config.ff_dim, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(F.gelu(self.fc_in(x)))


class Block(nn.Module):
    def __init__(self, config: TinyLMConfig) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.attn = Attention(config)
        self.mlp_norm = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.mlp = MLP(config)


class KVCache:
    """Keys and values of up to `num_slots` sequences of up to `max_seq_len` tokens each.

    Tensors `[n_layers, num_slots, n_heads, max_seq_len, head_dim]`; a sequence owns one slot from
    its prefill to its end (and, in the engine's prefix cache, after it). Which slots are free is
    the caller's business (the engine's scheduler).
    """

    def __init__(self, config: TinyLMConfig, num_slots: int) -> None:
        if num_slots < 1:
            raise LaminarError(error_codes.INVALID_ARG, f"a KV cache needs at least one slot, got {num_slots}")
        shape = (config.n_layers, num_slots, config.n_heads, config.max_seq_len, config.head_dim)
        self.config = config
        self.num_slots = num_slots
        self.keys = torch.zeros(shape)
        self.values = torch.zeros(shape)

    def grow(self, num_slots: int) -> None:
        """Room for `num_slots` sequences, the slots held kept as they are. Only between forwards:
        a forward reads the tensors this replaces."""
        if num_slots <= self.num_slots:
            return
        extra = (self.config.n_layers, num_slots - self.num_slots, self.config.n_heads, self.config.max_seq_len, self.config.head_dim)
        self.keys = torch.cat([self.keys, torch.zeros(extra)], dim=1)
        self.values = torch.cat([self.values, torch.zeros(extra)], dim=1)
        self.num_slots = num_slots

    def copy_prefix(self, source: int, target: int, length: int) -> None:
        """Positions 0 .. length - 1 of slot `source` into slot `target` (a prefix shared by two
        sequences: each needs its own copy, since each writes its own continuation after it)."""
        self.keys[:, target, :, :length] = self.keys[:, source, :, :length]
        self.values[:, target, :, :length] = self.values[:, source, :, :length]


class TinyLM(nn.Module):
    """The model. See the module docstring for its two paths and its parameter names."""

    def __init__(self, config: TinyLMConfig = TinyLMConfig()) -> None:
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.max_seq_len, config.d_model)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2-like initialisation: normal(0, 0.02), residual projections scaled by depth."""
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                nn.init.zeros_(p)
            elif "norm" in name:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * self.config.n_layers) if name.endswith(("attn.out.weight", "mlp.fc_out.weight")) else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    def _check_ids(self, input_ids: torch.Tensor, first_position: int = 0) -> None:
        if input_ids.dtype not in (torch.int64, torch.int32):
            raise LaminarError(error_codes.INVALID_ARG, f"input_ids must be an integer tensor, got {input_ids.dtype}")
        if input_ids.shape[-1] + first_position > self.config.max_seq_len:
            raise LaminarError(
                error_codes.INVALID_ARG, f"sequence of {input_ids.shape[-1] + first_position} tokens exceeds max_seq_len {self.config.max_seq_len}"
            )

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(x))

    def forward(self, input_ids: torch.Tensor, padding_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits [B, T, vocab] of every position of `input_ids` [B, T] (training path).

        `padding_mask` [B, T] (True on real tokens) keeps padded keys out of every query's view;
        with right padding (the usual case) it changes nothing for the real positions and may be
        left out.
        """
        self._check_ids(input_ids)
        b, t = input_ids.shape
        x = self.tok_emb(input_ids) + self.pos_emb(torch.arange(t)).unsqueeze(0)
        allowed = torch.ones(t, t, dtype=torch.bool).tril().view(1, 1, t, t)
        if padding_mask is not None:
            allowed = allowed & padding_mask.bool().view(b, 1, 1, t)
            # A padded query that sees no key at all would softmax over -inf only: let it see itself.
            allowed = allowed | torch.eye(t, dtype=torch.bool).view(1, 1, t, t)
        for layer in self.layers:
            x = x + layer.attn(layer.attn_norm(x), allowed)
            x = x + layer.mlp(layer.mlp_norm(x))
        return self._head(x)

    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, cache: KVCache, slot: int, start: int = 0) -> torch.Tensor:
        """Runs one sequence's tokens `input_ids` [T] into `slot` of `cache` at positions start ..
        start + T - 1; logits [vocab] of the last one. With `start` > 0 the slot must already hold
        the keys and values of positions 0 .. start - 1 (a cached prefix): only the suffix is computed."""
        self._check_ids(input_ids, start)
        t = input_ids.shape[0]
        x = self.tok_emb(input_ids.view(1, t)) + self.pos_emb(torch.arange(start, start + t)).unsqueeze(0)
        # Query i (position start + i) sees every key up to its own position.
        allowed = (torch.arange(start + t).view(1, -1) <= torch.arange(start, start + t).view(-1, 1)).view(1, 1, t, start + t)
        for i, layer in enumerate(self.layers):
            x = x + layer.attn.prefill(layer.attn_norm(x), cache.keys[i, slot], cache.values[i, slot], allowed, start)
            x = x + layer.mlp(layer.mlp_norm(x))
        return self._head(x[0, -1])

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """One step for a batch: `tokens` [B] at `positions` [B] of sequences in `slots` [B]; logits [B, vocab].

        Each sequence's slot must hold its keys and values for positions 0 .. position - 1.
        """
        if int(positions.max()) >= self.config.max_seq_len:
            raise LaminarError(error_codes.INVALID_ARG, f"position {int(positions.max())} is beyond max_seq_len {self.config.max_seq_len}")
        x = (self.tok_emb(tokens) + self.pos_emb(positions)).unsqueeze(1)
        for i, layer in enumerate(self.layers):
            x = x + layer.attn.decode(layer.attn_norm(x), cache.keys[i], cache.values[i], slots, positions)
            x = x + layer.mlp(layer.mlp_norm(x))
        return self._head(x[:, 0])

    @torch.no_grad()
    def extend(self, tokens: torch.Tensor, lengths: Sequence[int], slots: Sequence[int], starts: Sequence[int], cache: KVCache) -> torch.Tensor:
        """One forward for a batch of sequences that each add their own run of tokens: prefills (a
        prompt, or the part after a cached prefix) and decodes (one token) together, as an engine's
        mixed batch. Row i adds `lengths[i]` tokens at positions starts[i] .. into `slots[i]`,
        whose positions 0 .. starts[i] - 1 must hold its keys and values already; `tokens` [N]
        holds the rows' runs one after another. Returns the logits [B, vocab] of each row's last
        token, what `prefill` (and `decode`, for a run of one) returns for the row alone.

        The runs stay packed [N, D] through every linear layer and norm (no padding: a long prefill
        beside decodes costs what it costs alone; a LoRA hook sees one row per token). Attention
        runs in two groups: the leading rows of one token (the decodes, put first by the caller),
        as `decode` attends, and the rest padded to the longest run, each query seeing its own
        slot's keys up to its position.
        """
        b, n = len(lengths), int(tokens.shape[0])
        if b == 0 or min(lengths) < 1 or sum(lengths) != n:
            raise LaminarError(error_codes.INVALID_ARG, f"extend: {n} tokens do not make runs of lengths {list(lengths)} (each at least 1)")
        ends = [s + length for s, length in zip(starts, lengths)]
        if max(ends) > self.config.max_seq_len:
            raise LaminarError(error_codes.INVALID_ARG, f"sequence of {max(ends)} tokens exceeds max_seq_len {self.config.max_seq_len}")
        position = torch.tensor([s + j for s, length in zip(starts, lengths) for j in range(length)], dtype=torch.long)
        token_slot = torch.tensor([slot for slot, length in zip(slots, lengths) for _ in range(length)], dtype=torch.long)
        x = self.tok_emb(tokens) + self.pos_emb(position)

        # The leading rows of one token (packed tokens 0 .. d - 1) attend as `decode` does.
        d = next((i for i, length in enumerate(lengths) if length != 1), b)
        if d:
            d_span = max(starts[:d]) + 1
            d_slots = token_slot[:d]
            d_allowed = (torch.arange(d_span).view(1, d_span) <= position[:d].view(-1, 1)).view(d, 1, 1, d_span)
        if d < b:
            # The rest, padded to its longest run (no copy when it is one row); pads sit at
            # position 0, a key every slot holds, and are dropped after attention.
            rest = lengths[d:]
            r, t = len(rest), max(rest)
            r_span = max(ends[d:])
            r_slots = torch.tensor(list(slots[d:]), dtype=torch.long)
            into = None if r == 1 else torch.tensor([i * t + j for i, length in enumerate(rest) for j in range(length)], dtype=torch.long)
            padded = position[d:].view(1, t) if into is None else torch.zeros(r * t, dtype=torch.long).index_copy_(0, into, position[d:]).view(r, t)
            r_allowed = (torch.arange(r_span).view(1, 1, r_span) <= padded.view(r, t, 1)).view(r, 1, t, r_span)

        heads, head_dim = self.config.n_heads, self.config.head_dim
        for i, layer in enumerate(self.layers):
            attn = layer.attn
            q, k, v = attn.qkv(layer.attn_norm(x)).view(n, 3, heads, head_dim).unbind(1)
            k_layer, v_layer = cache.keys[i], cache.values[i]
            k_layer[token_slot, :, position] = k
            v_layer[token_slot, :, position] = v
            parts = []
            if d:
                out = attn._attend(q[:d].unsqueeze(2), k_layer[d_slots, :, :d_span], v_layer[d_slots, :, :d_span], d_allowed)
                parts.append(out.squeeze(2))
            if d < b:
                mine = q[d:]
                if into is not None:
                    mine = torch.zeros(r * t, heads, head_dim).index_copy_(0, into, mine)
                out = attn._attend(mine.view(r, t, heads, head_dim).transpose(1, 2), k_layer[r_slots, :, :r_span], v_layer[r_slots, :, :r_span], r_allowed)
                out = out.transpose(1, 2).reshape(r * t, heads, head_dim)
                parts.append(out if into is None else out.index_select(0, into))
            y = parts[0] if len(parts) == 1 else torch.cat(parts)
            x = x + attn.out(y.reshape(n, heads * head_dim))
            x = x + layer.mlp(layer.mlp_norm(x))
        # The head over every token, then each row's last: a LoRA hook on lm_head sees one row per token too.
        last = torch.tensor(list(itertools.accumulate(lengths)), dtype=torch.long) - 1
        return self._head(x).index_select(0, last)


def expected_shapes(config: TinyLMConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor name of a TinyLM of this config and its shape (the wire format)."""
    d, f, v = config.d_model, config.ff_dim, config.vocab_size
    shapes: dict[str, tuple[int, ...]] = {"tok_emb.weight": (v, d), "pos_emb.weight": (config.max_seq_len, d)}
    for i in range(config.n_layers):
        p = f"layers.{i}."
        shapes.update(
            {
                p + "attn_norm.weight": (d,),
                p + "attn_norm.bias": (d,),
                p + "attn.qkv.weight": (3 * d, d),
                p + "attn.qkv.bias": (3 * d,),
                p + "attn.out.weight": (d, d),
                p + "attn.out.bias": (d,),
                p + "mlp_norm.weight": (d,),
                p + "mlp_norm.bias": (d,),
                p + "mlp.fc_in.weight": (f, d),
                p + "mlp.fc_in.bias": (f,),
                p + "mlp.fc_out.weight": (d, f),
                p + "mlp.fc_out.bias": (d,),
            }
        )
    shapes.update({"norm.weight": (d,), "norm.bias": (d,), "lm_head.weight": (v, d)})
    return shapes


def parameter_count(config: TinyLMConfig) -> int:
    """How many parameters a TinyLM of this config has."""
    return sum(math.prod(s) for s in expected_shapes(config).values())


def validate_state_dict(state_dict: Mapping[str, torch.Tensor], config: TinyLMConfig) -> None:
    """Raises `ERR_MODEL_MISMATCH` naming the first missing, unexpected, mis-shaped or non-float32 tensor."""
    expected = expected_shapes(config)
    missing = [name for name in expected if name not in state_dict]
    if missing:
        raise LaminarError(
            error_codes.MODEL_MISMATCH,
            f"tensor {missing[0]} is missing" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
            {"tensor": missing[0], "missing": missing},
        )
    unexpected = sorted(name for name in state_dict if name not in expected)
    if unexpected:
        raise LaminarError(
            error_codes.MODEL_MISMATCH,
            f"tensor {unexpected[0]} is not a parameter of this model" + (f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""),
            {"tensor": unexpected[0], "unexpected": unexpected},
        )
    for name, shape in expected.items():
        tensor = state_dict[name]
        if tuple(tensor.shape) != shape:
            raise LaminarError(
                error_codes.MODEL_MISMATCH,
                f"tensor {name} has shape {list(tensor.shape)}, expected {list(shape)}",
                {"tensor": name, "shape": list(tensor.shape), "expected": list(shape)},
            )
        if tensor.dtype != torch.float32:
            raise LaminarError(
                error_codes.MODEL_MISMATCH,
                f"tensor {name} has dtype {str(tensor.dtype).replace('torch.', '')}, expected float32",
                {"tensor": name, "dtype": str(tensor.dtype)},
            )


def save_model(model: TinyLM, directory: PathLike, metadata: Optional[Mapping[str, str]] = None) -> Path:
    """Writes `config.json` and `model.safetensors` into `directory` (made if missing); returns it.

    Each file is written under a temporary name and renamed, so a reader never sees half a file.
    """
    tensors = {name: t.detach().contiguous() for name, t in model.state_dict().items()}
    return write_directory(directory, WEIGHTS_FILE, tensors, metadata, CONFIG_FILE, model.config.to_json())


def write_directory(
    directory: PathLike, weights_file: str, tensors: Mapping[str, torch.Tensor], metadata: Optional[Mapping[str, str]], config_file: str, config: Any
) -> Path:
    """Writes a safetensors file and a JSON config into `directory` (made if missing); returns it.

    Each file is written under a temporary name and renamed, the weights first: a reader never
    sees half a file, and a config present means the weights beside it are whole.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (weights_file + ".tmp")
    save_file(dict(tensors), str(tmp), metadata=dict(metadata) if metadata else None)
    os.replace(tmp, out / weights_file)
    tmp = out / (config_file + ".tmp")
    tmp.write_text(json.dumps(config, indent=2) + "\n")
    os.replace(tmp, out / config_file)
    return out


def load_config(directory: PathLike) -> TinyLMConfig:
    """The config of a model directory (its `config.json`)."""
    path = Path(directory) / CONFIG_FILE
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise LaminarError(error_codes.MODEL_MISMATCH, f"{path} does not exist", {"path": str(path)}) from err
    except (OSError, ValueError) as err:
        raise LaminarError(error_codes.MODEL_MISMATCH, f"cannot read {path}: {err}", {"path": str(path)}) from err
    return TinyLMConfig.from_json(obj)


def load_state_dict_file(path: PathLike, config: TinyLMConfig) -> dict[str, torch.Tensor]:
    """Reads a safetensors file with the `safetensors` library and validates it against `config`."""
    try:
        state_dict = load_file(str(path))
    except FileNotFoundError as err:
        raise LaminarError(error_codes.MODEL_MISMATCH, f"{path} does not exist", {"path": str(path)}) from err
    except (OSError, SafetensorError) as err:
        raise LaminarError(error_codes.BAD_SAFETENSORS, f"cannot read {path}: {err}", {"path": str(path)}) from err
    validate_state_dict(state_dict, config)
    return state_dict


def load_model(directory: PathLike, config: Optional[TinyLMConfig] = None) -> TinyLM:
    """A TinyLM from a model directory; with `config`, the directory's config.json (if any) must equal it."""
    directory = Path(directory)
    if config is None:
        config = load_config(directory)
    elif (directory / CONFIG_FILE).exists():
        found = load_config(directory)
        if found != config:
            raise LaminarError(error_codes.MODEL_MISMATCH, f"{directory / CONFIG_FILE} describes {found}, expected {config}")
    state_dict = load_state_dict_file(directory / WEIGHTS_FILE, config)
    model = TinyLM(config)
    model.load_state_dict(state_dict, strict=True)
    return model.eval()
