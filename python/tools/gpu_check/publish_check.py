"""The Python client's publish path from device tensors: ``RelayClient.publish`` of a state dict
whose tensors live on the device (CUDA: copied by torch from the device straight into the relay's
segment, tensor_source.py's device branch), then the version leased back and compared byte for
byte with the device tensors.

On CPU (``--cpu``) the same tensors are CPU tensors: the host branch (contiguous views, a strided
copy for the transposed one), the same relay, the same comparison; the device branch itself needs
a CUDA device and is not exercised there.
"""

from __future__ import annotations

import time
from typing import Any

from outcome import CheckFailed, PartResult

MODEL = "gpu-check"


def tensors_on(torch: Any, device: str, big_mib: int) -> dict[str, Any]:
    """A small state dict of the dtypes and layouts a trainer publishes, and one big tensor (many
    chunks, so the copy is split across the client's threads)."""
    g = torch.Generator(device=device).manual_seed(43)
    return {
        "embed.weight": torch.randn(512, 128, generator=g, device=device),
        "layers.0.mlp.weight": torch.randn(256, 512, generator=g, device=device).to(torch.bfloat16),
        # Not contiguous: the client makes it contiguous on the device (CUDA) or copies it with its strides (CPU).
        "layers.0.attn.weight_t": torch.randn(300, 200, generator=g, device=device).to(torch.float16).t(),
        "positions": torch.arange(1000, device=device, dtype=torch.int64),
        "flat": torch.randint(0, 256, (big_mib << 20,), generator=g, device=device, dtype=torch.uint8),
    }


def _bytes_of(torch: Any, tensor: Any) -> Any:
    return tensor.contiguous().reshape(-1).view(torch.uint8)


def run(torch: Any, device: str, relays: Any, big_mib: int) -> PartResult:
    from laminar.relay import RelayClient

    part = PartResult("publish")
    tensors = tensors_on(torch, device, big_mib)
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    relay = relays.start()
    with RelayClient(relay.socket_path, reconnect=False) as client:
        if device != "cpu":
            torch.cuda.synchronize()
        started = time.perf_counter()
        result = client.publish(MODEL, 1, tensors)
        stall = time.perf_counter() - started
        result.wait_visible(timeout=120)
        visible = time.perf_counter() - started
        part.row("tensors published from", f"{device} ({len(tensors)} tensors, {nbytes / 2**20:.1f} MiB)", "one is a transposed view")
        part.row("publish stall", f"{stall * 1000:.1f} ms", f"{nbytes / stall / 1e9:.2f} GB/s out of the {device}")
        part.row("visible (verified by the relay)", f"{visible * 1000:.1f} ms", "from the call to publish")
        with client.acquire(MODEL, version=1) as lease:
            lease.verify()  # the chunk checksums, computed again from the mapped bytes
            for name, tensor in tensors.items():
                served = lease.tensor(name)
                if tuple(served.shape) != tuple(tensor.shape) or served.dtype != tensor.dtype:
                    raise CheckFailed(f"{name}: leased as {served.dtype} {tuple(served.shape)}, published as {tensor.dtype} {tuple(tensor.shape)}")
                if not torch.equal(_bytes_of(torch, served), _bytes_of(torch, tensor).cpu()):
                    raise CheckFailed(f"{name}: the bytes read back differ from the {device} tensor's")
        part.row("bytes read back", "identical", "every tensor, and the chunk checksums verified again")
    part.figures.update(device=device, bytes=nbytes, stall_s=round(stall, 4), stall_gb_s=round(nbytes / stall / 1e9, 3), visible_s=round(visible, 4))
    return part
