"""The GPU check (python/tools/gpu_check, run on GPU hosts by scripts/gpu-check.sh) kept from
rotting on machines without a GPU: its CPU mode runs the same publish and bandwidth code against
a real relay, and without ``--cpu`` a machine with no CUDA device ends with the check's own exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "python" / "tools" / "gpu_check"
sys.path.insert(0, str(CHECK))

import pcie_link  # noqa: E402
from outcome import EXIT_NO_GPU, EXIT_PASSED  # noqa: E402

pytest.importorskip("torch", reason="the GPU check measures with torch")


def run_check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(CHECK), *args], capture_output=True, text=True, timeout=240, env={**os.environ, **(env or {})})


def test_cpu_mode_publishes_reads_back_and_measures(tmp_path: Path) -> None:
    record = tmp_path / "gpu.md"
    done = run_check(
        "--cpu", "--size-mib", "4", "--publish-mib", "2", "--repeats", "2", "--publish-versions", "2", "--spare-versions", "1", "--record-to", str(record)
    )
    assert done.returncode == EXIT_PASSED, done.stdout + done.stderr
    line = json.loads(done.stdout.strip().splitlines()[-1])
    publish, h2d = line["parts"]["publish"], line["parts"]["h2d"]
    assert line["mode"] == "cpu (--cpu)"
    assert publish["status"] == "passed" and publish["device"] == "cpu"
    assert publish["bytes"] > 2 << 20 and publish["stall_s"] > 0
    # The first version's stall and the next ones' median, back to back; the last version is read back.
    # Then one version into the spare segment the relay prepared once quiet.
    assert publish["versions"] == 3 and publish["steady_stall_s"] > 0 and publish["spare_stall_s"] > 0
    assert "| publish | bytes read back | identical | every tensor of version 3," in done.stdout
    assert h2d["status"] == "passed" and h2d["bytes"] == 4 << 20
    assert h2d["unpinned"]["best_gb_s"] >= h2d["unpinned"]["median_gb_s"] > 0
    # What needs CUDA is skipped, and the table says why.
    assert h2d["registered"] is None and h2d["pinned"] is None and h2d["pcie"] is None
    assert "| h2d | leased mapping, cudaHostRegister | skipped | no CUDA device" in done.stdout
    assert "| h2d | torch pinned buffer (practical limit) | skipped | pin_memory refused: " in done.stdout
    # --record-to: the dated section with the same table and JSON line.
    section = record.read_text()
    assert section.startswith("\n## ") and ": cpu (--cpu)\n" in section
    assert "| publish | bytes read back | identical |" in section
    assert json.loads(section.split("```json\n")[1].split("\n```")[0]) == line


def test_cpu_mode_loads_a_leased_model_tensor_by_tensor() -> None:
    done = run_check("--cpu", "--parts", "load", "--load-layers", "1")
    assert done.returncode == EXIT_PASSED, done.stdout + done.stderr
    load = json.loads(done.stdout.strip().splitlines()[-1])["parts"]["load"]
    assert load["status"] == "passed" and load["tensors"] == 12  # embeddings, 9 per layer, norm, head
    assert load["unregistered"]["load_s"] > 0 and load["registered"] is None
    assert "| load | parameters after each load | identical |" in done.stdout


def test_without_a_cuda_device_it_refuses_with_its_own_exit() -> None:
    done = run_check("--parts", "h2d", env={"CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == EXIT_NO_GPU, done.stdout + done.stderr
    assert "no CUDA device" in done.stderr and "`--cpu` runs its CPU path" in done.stderr
    assert done.stdout == ""


def test_an_unknown_part_is_a_usage_error() -> None:
    done = run_check("--cpu", "--parts", "publish,warp")
    assert done.returncode == 2
    assert "unknown part(s) warp" in done.stderr


def test_pcie_limits_from_nvidia_smi_fields() -> None:
    link = pcie_link.parse_query("NVIDIA H200, 580.159.03, 1, 5, 16, 16")
    assert link.theoretical_gb_s() == pytest.approx(63.015, abs=1e-3)  # gen 5 x16: 32 GT/s, 128b/130b
    assert link.theoretical_gb_s("current") == pytest.approx(4.0)  # idle links train down to gen 1
    assert pcie_link.parse_query("NVIDIA A100, 550.54, 4, 4, 16, 16").theoretical_gb_s() == pytest.approx(31.508, abs=1e-3)
    hidden = pcie_link.parse_query("NVIDIA H200, 580.159.03, [N/A], [N/A], [N/A], [N/A]")
    assert hidden.theoretical_gb_s() is None
    with pytest.raises(ValueError):
        pcie_link.parse_query("NVIDIA H200, 580.159.03")
