"""The Python client's publish path from device tensors: ``RelayClient.publish`` of a state dict
whose tensors live on the device (CUDA: copied by torch from the device straight into the relay's
segment, tensor_source.py's device branch), then the version leased back and compared byte for
byte with the device tensors.

It publishes ``versions`` versions one after another (the big tensor changed on the device
between them, as a trainer's step would): the first pays what a process pays once (the copy
threads, the CUDA driver's staging buffers, the relay's first segment of that size), the later
ones, back to back, each into a new segment (every page allocated and zeroed by the relay at
``begin``). Then ``spare_versions`` more, each once the relay reports a prepared spare segment
(what a trainer whose steps are seconds apart gets: the relay prepares one after ``--spare-quiet``
with nothing moving), which is the stall a trainer pays at every step. All three are reported;
the last version is the one read back.

On CPU (``--cpu``) the same tensors are CPU tensors: the host branch (contiguous views, a strided
copy for the transposed one), the same relay, the same comparison; the device branch itself needs
a CUDA device and is not exercised there.
"""

from __future__ import annotations

import statistics
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


def _wait_for_spare(client: Any, nbytes: int, timeout: float = 60.0) -> bool:
    """Polls the relay's status until a prepared spare of at least ``nbytes`` is there (False at
    the timeout: the relay prepares one once nothing moved for its --spare-quiet)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spares = client.status()["spares"]
        if spares["count"] > 0 and spares["warming"] == 0 and spares["bytes"] >= nbytes:
            return True
        time.sleep(0.05)
    return False


def run(torch: Any, device: str, relays: Any, big_mib: int, versions: int = 4, spare_versions: int = 2) -> PartResult:
    from laminar.relay import RelayClient

    part = PartResult("publish")
    tensors = tensors_on(torch, device, big_mib)
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    # A spare is prepared after --spare-quiet with nothing moving (5 s by default): 1 s here, so
    # that the check waits less; what is measured, a publish into a prepared spare, is the same.
    relay = relays.start(["--spare-quiet", "1s"])
    stalls, visibles, spare_stalls = [], [], []
    with RelayClient(relay.socket_path, reconnect=False) as client:
        for version in range(1, versions + spare_versions + 1):
            if version > 1:
                tensors["flat"].add_(1)  # a step's change, made on the device
            into_spare = version > versions
            if into_spare and not _wait_for_spare(client, nbytes):
                raise CheckFailed("the relay prepared no spare segment within 60 s of a quiet relay")
            if device != "cpu":
                torch.cuda.synchronize()
            started = time.perf_counter()
            result = client.publish(MODEL, version, tensors)
            (spare_stalls if into_spare else stalls).append(time.perf_counter() - started)
            result.wait_visible(timeout=120)
            visibles.append(time.perf_counter() - started)
        last = versions + spare_versions
        first, steady = stalls[0], statistics.median(stalls[1:]) if versions > 1 else stalls[0]
        part.row("tensors published from", f"{device} ({len(tensors)} tensors, {nbytes / 2**20:.1f} MiB)", "one is a transposed view")
        part.row("publish stall, first version", f"{first * 1000:.1f} ms", f"{nbytes / first / 1e9:.2f} GB/s out of the {device}")
        if versions > 1:
            part.row(
                "publish stall, next versions",
                f"{steady * 1000:.1f} ms",
                f"{nbytes / steady / 1e9:.2f} GB/s; median of versions 2-{versions}, back to back, each into a new segment",
            )
        spare = statistics.median(spare_stalls) if spare_stalls else None
        if spare is not None:
            part.row(
                "publish stall, into a spare segment",
                f"{spare * 1000:.1f} ms",
                f"{nbytes / spare / 1e9:.2f} GB/s; median of {spare_versions}, each once the relay had a spare ready: a trainer's step",
            )
        part.row("visible (verified by the relay)", f"{statistics.median(visibles) * 1000:.1f} ms", f"from the call to publish; median of {last}")
        with client.acquire(MODEL, version=last) as lease:
            lease.verify()  # the chunk checksums, computed again from the mapped bytes
            for name, tensor in tensors.items():
                served = lease.tensor(name)
                if tuple(served.shape) != tuple(tensor.shape) or served.dtype != tensor.dtype:
                    raise CheckFailed(f"{name}: leased as {served.dtype} {tuple(served.shape)}, published as {tensor.dtype} {tuple(tensor.shape)}")
                if not torch.equal(_bytes_of(torch, served), _bytes_of(torch, tensor).cpu()):
                    raise CheckFailed(f"{name}: the bytes of version {last} read back differ from the {device} tensor's")
        part.row("bytes read back", "identical", f"every tensor of version {last}, and the chunk checksums verified again")
    part.figures.update(
        device=device,
        bytes=nbytes,
        versions=last,
        stall_s=round(first, 4),
        stall_gb_s=round(nbytes / first / 1e9, 3),
        steady_stall_s=round(steady, 4),
        steady_stall_gb_s=round(nbytes / steady / 1e9, 3),
        spare_stall_s=round(spare, 4) if spare is not None else None,
        spare_stall_gb_s=round(nbytes / spare / 1e9, 3) if spare is not None else None,
        visible_s=round(statistics.median(visibles), 4),
    )
    return part
