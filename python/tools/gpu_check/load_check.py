"""A rollout's weight load from a lease: a Llama-7B-shaped version (bf16; embeddings, 32 layers of
attention and MLP weights, norms, the LM head) published into a real relay, leased, and copied
onto the device tensor by tensor into preallocated parameters, as a model's ``load_weights``
does (``param.copy_(leased)``): with the lease's mapping as it is, and page-locked first with
``Lease.register_cuda()`` (what verl's rollouts do where CUDA is), each the median of 3 loads, the
registration counted in the load. The parameters are compared with the published tensors.

On CPU (``--cpu``) the shapes are small and only the unregistered load runs (nothing to register
with).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Iterator

from outcome import CheckFailed, PartResult

MODEL = "gpu-check-load"
#: Llama-2-7B's hidden size, MLP size and vocabulary; small ones on CPU.
SHAPES = {"gpu": (4096, 11008, 32000), "cpu": (256, 688, 2000)}


def llama_shapes(layers: int, hidden: int, mlp: int, vocab: int) -> Iterator[tuple[str, tuple[int, ...]]]:
    yield "model.embed_tokens.weight", (vocab, hidden)
    for i in range(layers):
        prefix = f"model.layers.{i}."
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            yield f"{prefix}self_attn.{name}.weight", (hidden, hidden)
        yield f"{prefix}mlp.gate_proj.weight", (mlp, hidden)
        yield f"{prefix}mlp.up_proj.weight", (mlp, hidden)
        yield f"{prefix}mlp.down_proj.weight", (hidden, mlp)
        yield f"{prefix}input_layernorm.weight", (hidden,)
        yield f"{prefix}post_attention_layernorm.weight", (hidden,)
    yield "model.norm.weight", (hidden,)
    yield "lm_head.weight", (vocab, hidden)


def run(torch: Any, device: str, relays: Any, layers: int, rounds: int = 3) -> PartResult:
    from laminar.relay import RelayClient

    part = PartResult("load")
    hidden, mlp, vocab = SHAPES["cpu" if device == "cpu" else "gpu"]
    g = torch.Generator(device=device).manual_seed(7)
    state = {n: torch.randn(s, generator=g, device=device).to(torch.bfloat16) for n, s in llama_shapes(layers, hidden, mlp, vocab)}
    params = {n: torch.empty_like(t) for n, t in state.items()}
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    relay = relays.start()
    figures: dict[str, Any] = {"device": device, "bytes": nbytes, "tensors": len(state), "layers": layers}
    with RelayClient(relay.socket_path, reconnect=False) as client:
        client.publish(MODEL, 1, state).wait_visible(timeout=600)

        def load(register: bool) -> tuple[float, float]:
            with client.acquire(MODEL, version=1) as lease:
                sync()
                started = time.perf_counter()
                if register:
                    lease.register_cuda()
                registered = time.perf_counter()
                for name, leased in lease.torch().items():
                    params[name].copy_(leased)
                sync()
                return registered - started, time.perf_counter() - registered

        modes = (False,) if device == "cpu" else (False, True)
        timings: dict[bool, list[tuple[float, float]]] = {mode: [] for mode in modes}
        for _ in range(rounds):
            for mode in modes:  # interleaved: a drift of the machine hits both alike
                timings[mode].append(load(mode))
                if not all(torch.equal(params[n], state[n]) for n in state):
                    raise CheckFailed("the parameters loaded from the lease differ from the published tensors")
    part.row(
        "version", f"{len(state)} tensors, {nbytes / 2**20:,.0f} MiB bf16", f"Llama-7B-shaped ({layers} layers, hidden {hidden}, MLP {mlp}, vocabulary {vocab})"
    )
    for mode, runs in timings.items():
        key = "registered" if mode else "unregistered"
        total = statistics.median(r + c for r, c in runs)
        register = statistics.median(r for r, _ in runs)
        figures[key] = {"load_s": round(total, 4), "register_s": round(register, 4), "gb_s": round(nbytes / total / 1e9, 3)}
        label = "load, lease registered first (Lease.register_cuda)" if mode else "load, lease as mapped"
        note = (
            f"{nbytes / total / 1e9:.2f} GB/s; registering {register * 1000:.0f} ms of it"
            if mode
            else f"{nbytes / total / 1e9:.2f} GB/s, " + ("a memory copy" if device == "cpu" else "staged by the driver")
        )
        part.row(label, f"{total * 1000:.0f} ms", f"{note}; median of {rounds}")
    if device == "cpu":
        figures["registered"] = None
        part.row("load, lease registered first (Lease.register_cuda)", "skipped", "no CUDA device: nothing to register with")
    else:
        figures["registered_speedup"] = round(figures["unregistered"]["load_s"] / figures["registered"]["load_s"], 2)
    part.row("parameters after each load", "identical", "to the published tensors")
    part.figures.update(figures)
    return part
