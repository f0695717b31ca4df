"""The GPU check (issue 43, item 5): on a machine with an NVIDIA GPU, in under ten minutes,

- publish: the Python client publishes a version from CUDA tensors into a real relay; the bytes
  read back from the lease are compared with the device tensors (publish_check.py);
- h2d: host-to-device bandwidth from a leased version: the mapping unpinned, the mapping
  page-locked with cudaHostRegister, a pinned torch buffer, and the PCIe link's theoretical limit
  (h2d_bandwidth.py);
- load: a Llama-7B-shaped version loaded from a lease onto the device tensor by tensor, the
  lease as mapped against the lease registered first with ``Lease.register_cuda()``
  (load_check.py);
- vllm: a real ``vllm serve`` (the CUDA build) with laminar's worker extension: logprobs against a
  reference, a reload, refusals that leave the served weights untouched (vllm_check.py).

It prints a table and one JSON line; ``--record`` appends them, dated, to docs/performance/gpu.md.
Run it through scripts/gpu-check.sh (which makes the environment); docs/reference/vllm.md says how.

``--cpu`` runs the same code on the CPU (publish from CPU tensors, the unpinned copy; pinned and
registered copies skipped with the reason), for machines without a GPU and for the test that keeps
this script from rotting (python/tests/test_gpu_check.py). Without ``--cpu`` a machine with no
CUDA device ends at once with exit 3 (outcome.py lists the exits).

    python python/tools/gpu_check [--cpu] [--parts publish,h2d,load,vllm] [--record] [--size-mib N]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import h2d_bandwidth
import load_check
import publish_check
import report
import vllm_check
from outcome import EXIT_ENVIRONMENT, EXIT_FAILED, EXIT_NO_GPU, EXIT_PASSED, CheckFailed, EnvironmentMissing, PartResult
from relays import Relays

PARTS = ("publish", "h2d", "load", "vllm")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (no GPU needed): the same code, the GPU-only measurements skipped with their reason")
    parser.add_argument("--parts", default=None, help=f"comma-separated, of {','.join(PARTS)} (default: all on a GPU; publish,h2d with --cpu)")
    parser.add_argument("--device", default="cuda:0", help="the CUDA device (default cuda:0)")
    parser.add_argument("--size-mib", type=int, default=None, help="bytes of the bandwidth version (default 1024; 32 with --cpu)")
    parser.add_argument("--publish-mib", type=int, default=None, help="size of the big tensor of the publish check (default 256; 16 with --cpu)")
    parser.add_argument(
        "--publish-versions", type=int, default=4, help="versions published back to back: the first stall and the next ones' median are reported (default 4)"
    )
    parser.add_argument(
        "--spare-versions",
        type=int,
        default=2,
        help="versions published after those, each once the relay has a spare segment ready, as a trainer's steps (default 2; 0: none)",
    )
    parser.add_argument(
        "--load-layers", type=int, default=None, help="layers of the load part's Llama-7B-shaped version (default 32: 12.6 GiB; 2 small ones with --cpu)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed copies per measurement (default 5)")
    parser.add_argument("--eager", action="store_true", help="vllm serve --enforce-eager (default on a GPU: CUDA graphs and torch.compile, as in production)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.2, help="vllm serve's share of the GPU (default 0.2)")
    parser.add_argument("--budget-s", type=float, default=540.0, help="the whole check's time budget; vllm serve gets what is left (default 540)")
    parser.add_argument("--record", action="store_true", help="append a dated section to docs/performance/gpu.md")
    parser.add_argument("--record-to", type=Path, default=None, help="append it to this file instead (tests)")
    args = parser.parse_args(argv)
    args.parts = tuple(args.parts.split(",")) if args.parts else (("publish", "h2d") if args.cpu else PARTS)
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; the parts are {', '.join(PARTS)}")
    if args.publish_versions < 1:
        parser.error("--publish-versions must be at least 1")
    if args.spare_versions < 0:
        parser.error("--spare-versions must be 0 or more")
    if args.load_layers is not None and args.load_layers < 1:
        parser.error("--load-layers must be at least 1")
    args.load_layers = args.load_layers or (2 if args.cpu else 32)
    args.size_mib = args.size_mib or (32 if args.cpu else 1024)
    args.publish_mib = args.publish_mib or (16 if args.cpu else 256)
    return args


def device_of(torch: Any, args: argparse.Namespace) -> str:
    """The device to run on; exits EXIT_NO_GPU when a GPU is required and there is none."""
    if args.cpu:
        return "cpu"
    if not torch.cuda.is_available():
        why = "torch was built without CUDA" if torch.version.cuda is None else f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"
        print(f"gpu_check: no CUDA device: {why}. This check needs an NVIDIA GPU; `--cpu` runs its CPU path.", file=sys.stderr)
        sys.exit(EXIT_NO_GPU)
    return args.device


def environment(torch: Any, device: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "mode": "cpu (--cpu)" if device == "cpu" else "gpu",
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    if device != "cpu":
        env.update(gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda, driver=_driver())
    return env


def _driver() -> Any:
    import pcie_link

    link, _ = pcie_link.query()
    return link.driver if link else None


def main(argv: list[str]) -> int:
    args = parse(argv)
    import torch

    device = device_of(torch, args)
    deadline = time.monotonic() + args.budget_s
    runs: dict[str, Callable[[Relays, Path], PartResult]] = {
        "publish": lambda relays, work: publish_check.run(torch, device, relays, args.publish_mib, args.publish_versions, args.spare_versions),
        "h2d": lambda relays, work: h2d_bandwidth.run(torch, device, relays, args.size_mib, args.repeats),
        "load": lambda relays, work: load_check.run(torch, device, relays, args.load_layers),
        "vllm": lambda relays, work: vllm_check.run(
            device, relays, work, max(30.0, deadline - time.monotonic() - 60), args.eager or device == "cpu", args.gpu_memory_utilization
        ),
    }
    parts: list[PartResult] = []
    missing: list[str] = []
    with Relays() as relays, tempfile.TemporaryDirectory(prefix="laminar-gpu-check-") as work:
        for name in args.parts:
            started = time.perf_counter()
            try:
                part = runs[name](relays, Path(work))
            except EnvironmentMissing as err:
                part = PartResult(name).skip(f"cannot run here: {err}")
                missing.append(name)
            except CheckFailed as err:
                part = PartResult(name).fail(str(err))
            except Exception as err:  # a crash is a failure of the part, with its traceback
                traceback.print_exc()
                part = PartResult(name).fail(f"{type(err).__name__}: {err}")
            part.figures["seconds"] = round(time.perf_counter() - started, 2)
            parts.append(part)
            if name == "vllm" and part.status == "failed":
                log = Path(work) / "vllm.log"
                if log.exists():
                    print(f"--- the last lines of vllm serve's log ---\n{''.join(log.read_text(errors='replace').splitlines(True)[-40:])}", file=sys.stderr)

    env = environment(torch, device)
    print(report.table(parts))
    print(report.json_line(env, parts))
    if args.record or args.record_to:
        when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        command = "python python/tools/gpu_check " + shlex.join(argv)
        report.record(args.record_to or report.RECORD, report.section(when, command, env, parts))
    if any(p.status == "failed" for p in parts):
        return EXIT_FAILED
    return EXIT_ENVIRONMENT if missing else EXIT_PASSED


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    # `timeout` (scripts/gpu-check.sh) ends the check with SIGTERM: unwinding runs the cleanups,
    # which stop vllm serve's process group and the relays, instead of leaving them behind.
    sys.exit(128 + signum)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    sys.exit(main(sys.argv[1:]))
