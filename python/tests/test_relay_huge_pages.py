"""Versions on 2 MiB pages (the relay's default where the host allows it) are plain safetensors
files: numpy and the safetensors library read them, and the Python client maps them with the
same 2 MiB pages the relay gave them."""

from __future__ import annotations

import re

import numpy as np
import pytest
from safetensors.numpy import load_file

from laminar import RelayClient

pytestmark = pytest.mark.timeout(120)

MIB = 1024 * 1024


def pmd_mapped_bytes(path: str) -> int:
    """Bytes of this process's mappings of ``path`` mapped with 2 MiB (PMD) entries."""
    total = 0
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                inside = line.rstrip("\n").endswith(" " + path)
            elif inside and line.startswith("ShmemPmdMapped:"):
                total += int(line.split()[1]) * 1024
    return total


def test_a_version_on_huge_pages_is_a_safetensors_file_read_on_huge_pages(relay):
    weights = {"w": np.arange(4 * MIB, dtype=np.float32), "b": np.full(3, 7, np.int16)}
    with RelayClient(relay.socket_path) as client:
        status = client.status()
        assert status["pages"]["size"] == 2 * MIB, status["pages"]
        client.publish("m", 1, weights).wait_visible(timeout=60)
        with client.acquire("m", version=1, timeout=60) as lease:
            view = lease.numpy("w")
            assert float(view.sum(dtype=np.float64)) == float(weights["w"].sum(dtype=np.float64))
            # 16 MiB of data: at least seven whole 2 MiB pages, mapped as such by this process.
            assert pmd_mapped_bytes(lease.path) >= 7 * 2 * MIB
            # Any framework opens the file itself.
            loaded = load_file(lease.path)
            assert np.array_equal(loaded["w"], weights["w"]) and np.array_equal(loaded["b"], weights["b"])
            raw = np.memmap(lease.path, dtype=np.uint8, mode="r")
            header_length = int(raw[:8].view(np.uint64)[0])
            assert header_length + 8 + 16 * MIB + 6 == raw.size
