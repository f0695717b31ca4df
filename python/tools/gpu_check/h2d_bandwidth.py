"""Host-to-device bandwidth from a leased version: what a rollout pays to copy weights it acquired
from its relay (a read-only shared-memory mapping) onto its GPU.

Three copies of the same bytes into one device buffer, each timed after a warm-up:
- unpinned: the lease's mapping as it is (pageable): the CUDA driver stages it through its own
  pinned buffers, chunk by chunk;
- registered: the same mapping page-locked in place by ``Lease.register_cuda()`` (the client's
  ``cudaHostRegister``, read-only flag where the device supports it: the mapping is PROT_READ;
  its time is reported), then copied by DMA straight from it;
- pinned: a ``torch.empty(pin_memory=True)`` buffer, the practical limit of this link;
and the link's theoretical limit from nvidia-smi (pcie_link.py).

On CPU (``--cpu``) the device is the CPU: the unpinned copy is a plain memory copy, and the pinned
and registered copies are skipped with the reason torch or the machine gives.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Optional

import pcie_link
from outcome import CheckFailed, PartResult

MODEL = "gpu-check-h2d"


def _timed_copies(torch: Any, device: str, destination: Any, source: Any, repeats: int, non_blocking: bool) -> list[float]:
    """Seconds of each of ``repeats`` copies (after one warm-up), synchronised around each."""
    sync: Callable[[], None] = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    seconds = []
    for i in range(repeats + 1):
        sync()
        started = time.perf_counter()
        destination.copy_(source, non_blocking=non_blocking)
        sync()
        if i > 0:
            seconds.append(time.perf_counter() - started)
    return seconds


def _summary(nbytes: int, seconds: list[float]) -> dict[str, float]:
    return {"best_gb_s": round(nbytes / min(seconds) / 1e9, 3), "median_gb_s": round(nbytes / statistics.median(seconds) / 1e9, 3)}


def run(torch: Any, device: str, relays: Any, size_mib: int, repeats: int) -> PartResult:
    from laminar.relay import RelayClient

    part = PartResult("h2d")
    refused: Optional[str] = None
    nbytes = size_mib << 20
    g = torch.Generator(device=device).manual_seed(5)
    published = torch.randint(0, 256, (nbytes,), generator=g, device=device, dtype=torch.uint8)
    destination = torch.empty(nbytes, dtype=torch.uint8, device=device)
    relay = relays.start()
    figures: dict[str, Any] = {"device": device, "bytes": nbytes, "repeats": repeats}

    def measure(key: str, label: str, source: Any, non_blocking: bool, note: str) -> dict[str, Any]:
        """Times the copies of ``source`` into the device buffer, checks the bytes that landed, and
        adds the figures and the row."""
        destination.zero_()
        summary = _summary(nbytes, _timed_copies(torch, device, destination, source, repeats, non_blocking))
        if not torch.equal(destination, published):
            raise CheckFailed(f"the {label} copy put other bytes on the {device} than were published")
        figures[key] = summary
        part.row(label, f"{summary['best_gb_s']:.2f} GB/s", f"median {summary['median_gb_s']:.2f}; {note}")
        return summary

    with RelayClient(relay.socket_path, reconnect=False) as client:
        client.publish(MODEL, 1, {"blob": published}).wait_visible(timeout=300)
        with client.acquire(MODEL, version=1) as lease:
            leased = lease.tensor("blob")  # a read-only view of the relay's shared memory
            measure("unpinned", "leased mapping, unpinned", leased, False, "pageable, staged by the driver")
            if device == "cpu":
                figures["registered"] = None
                part.row("leased mapping, cudaHostRegister", "skipped", "no CUDA device: nothing to register with")
            else:
                from laminar.errors import LaminarError
                from laminar.relay.cuda_registration import READ_ONLY

                try:
                    started = time.perf_counter()
                    lease.register_cuda()  # the library's own registration, of the whole mapping
                    figures["register_s"] = round(time.perf_counter() - started, 4)
                except LaminarError as err:
                    # Reported, and the part fails at the end; the other measurements still run.
                    refused = str(err)
                    figures["registered"] = {"error": refused}
                    part.row("leased mapping, cudaHostRegister", "refused", refused)
                else:
                    flags = lease.cuda_registration.flags if lease.cuda_registration else None
                    note = "registered read-only" if flags and flags & READ_ONLY else "registered without the read-only flag"
                    measure("registered", "leased mapping, cudaHostRegister", leased, True, note)["flags"] = flags
                    part.row(
                        "registering the lease (Lease.register_cuda)",
                        f"{figures['register_s'] * 1000:.1f} ms",
                        f"{lease.size / 2**20:.0f} MiB mapping, once per lease",
                    )

    try:
        pinned_source = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    except RuntimeError as err:
        reason = str(err).strip().splitlines()[0].split(". ")[0]
        figures["pinned"] = None
        part.row("torch pinned buffer (practical limit)", "skipped", f"pin_memory refused: {reason}")
    else:
        pinned_source.copy_(published.cpu())
        measure("pinned", "torch pinned buffer (practical limit)", pinned_source, True, "torch.empty(pin_memory=True)")

    if device == "cpu":
        figures["pcie"] = None
        part.row("PCIe link (theoretical)", "skipped", "no GPU")
    else:
        link, why = pcie_link.query(torch.device(device).index or 0)
        ceiling = link.theoretical_gb_s() if link else None
        figures["pcie"] = (
            None
            if link is None
            else {"gen": link.gen_max, "width": link.width_max, "gen_now": link.gen_current, "width_now": link.width_current, "gb_s": ceiling}
        )
        if ceiling is None:
            part.row(
                "PCIe link (theoretical)", "unknown", why or f"nvidia-smi reports gen {link.gen_max if link else '?'} width {link.width_max if link else '?'}"
            )
        else:
            part.row(
                "PCIe link (theoretical)", f"{ceiling:.2f} GB/s", f"gen {link.gen_max} x{link.width_max} (now gen {link.gen_current} x{link.width_current})"
            )
            for key in ("unpinned", "registered", "pinned"):
                if figures.get(key):
                    figures[key]["of_link"] = round(figures[key]["best_gb_s"] / ceiling, 3)
    part.row("size", f"{size_mib} MiB", f"best and median of {repeats} copies after a warm-up")
    part.figures.update(figures)
    return part if refused is None else part.fail(refused)
