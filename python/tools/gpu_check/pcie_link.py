"""The theoretical host-to-device limit of a GPU's PCIe link, from nvidia-smi's generation and width.

Per lane and direction, after line coding: gen 1-2 use 8b/10b, gen 3-5 128b/130b, gen 6 PAM4 with
FLIT mode (242 data bytes in 256). These are the ceilings a copy is compared against; the practical
limit is a copy from page-locked memory (h2d_bandwidth.py), which TLP headers keep ~10-20 % lower.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Optional

#: GB/s (10^9 bytes) per lane, one direction.
LANE_GB_S = {1: 2.5 * 8 / 10 / 8, 2: 5.0 * 8 / 10 / 8, 3: 8.0 * 128 / 130 / 8, 4: 16.0 * 128 / 130 / 8, 5: 32.0 * 128 / 130 / 8, 6: 64.0 * 242 / 256 / 8}

QUERY = "name,driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max"


@dataclass(frozen=True)
class GpuLink:
    name: str
    driver: str
    gen_current: Optional[int]
    gen_max: Optional[int]
    width_current: Optional[int]
    width_max: Optional[int]

    def theoretical_gb_s(self, which: str = "max") -> Optional[float]:
        """The link's one-direction ceiling at its max (or current) generation and width."""
        gen, width = (self.gen_max, self.width_max) if which == "max" else (self.gen_current, self.width_current)
        if gen is None or width is None or gen not in LANE_GB_S:
            return None
        return LANE_GB_S[gen] * width


def _number(text: str) -> Optional[int]:
    text = text.strip()
    return int(text) if text.isdigit() else None  # "[N/A]" in VMs that hide the link


def parse_query(line: str) -> GpuLink:
    """One line of ``nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits``."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != 6:
        raise ValueError(f"nvidia-smi answered {line!r}, not the 6 fields of {QUERY}")
    name, driver, gen_c, gen_m, width_c, width_m = fields
    return GpuLink(name, driver, _number(gen_c), _number(gen_m), _number(width_c), _number(width_m))


def query(index: int = 0) -> tuple[Optional[GpuLink], Optional[str]]:
    """The link of GPU ``index``, or None and why not."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None, "nvidia-smi is not on PATH"
    done = subprocess.run([smi, f"--id={index}", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return None, f"nvidia-smi failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
    try:
        return parse_query(done.stdout.strip().splitlines()[0]), None
    except (ValueError, IndexError) as err:
        return None, str(err)
