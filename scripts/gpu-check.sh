#!/usr/bin/env bash
# The GPU check (issue 43, item 5), for a machine with an NVIDIA GPU: the real-vLLM checks on
# vLLM's CUDA build, the Python client's CUDA publish path, host-to-device bandwidth from a
# leased version (cudaHostRegister vs unpinned vs pinned vs the PCIe link), and a Llama-7B-shaped
# load from a lease (as mapped vs Lease.register_cuda). The driver is
# python/tools/gpu_check (its docstring says what each part checks); it prints a table and a
# JSON line, and with --record appends them, dated, to docs/performance/gpu.md.
#
#   bash scripts/gpu-check.sh [--record] [driver options]     (python python/tools/gpu_check --help)
#
# The environment, made once and idempotent like the bootstrap's (a stamp holds the lock's hash):
#   .venv-gpu: /usr/bin/python3 (3.11 to 3.14), python/requirements-gpu.txt installed with
#   --no-deps (vllm 0.32.0 and torch 2.13.0 with CUDA 13, every package pinned), laminar's client
#   installed editable. Several GB the first time.
# Offline: LAMINAR_GPU_WHEELHOUSE=DIR installs from a folder of wheels (pip download -r
#   python/requirements-gpu.txt --no-deps -d DIR on a machine that reaches PyPI) instead of PyPI.
# Another interpreter: LAMINAR_GPU_PYTHON=/path/to/python uses it as it is (it must import torch
#   with CUDA, and vllm for the vllm part; laminar is put on its path from python/src).
# Also needed: node 20 and the built tree (dist/, the native addon): `bash scripts/bootstrap.sh`.
#
# Exits: 0 passed; 1 a check failed; 2 usage; 3 no CUDA device; 4 something this machine lacks
# (the environment could not be made, no node, no dist/ or addon, no vllm): the message says what.
# The check itself is bounded to ten minutes (--budget-s 540 inside, `timeout 600` around it).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'gpu-check: %s\n' "$*" >&2; }
EXIT_ENVIRONMENT=4

command -v node >/dev/null || { say "node is not on PATH: the relay is \`laminar relay\` (Node 20); install it, then bash scripts/bootstrap.sh"; exit $EXIT_ENVIRONMENT; }
[ -f dist/src/cli/laminar.js ] || { say "dist/ is not built: run bash scripts/bootstrap.sh (or npx tsc -p tsconfig.json)"; exit $EXIT_ENVIRONMENT; }
[ -f build/Release/laminar_native.node ] || { say "the native addon is not built: run bash scripts/bootstrap.sh"; exit $EXIT_ENVIRONMENT; }

venv=.venv-gpu
lock=python/requirements-gpu.txt
if [ -n "${LAMINAR_GPU_PYTHON:-}" ]; then
  python="$LAMINAR_GPU_PYTHON"
  export PYTHONPATH="$PWD/python/src${PYTHONPATH:+:$PYTHONPATH}"
  say "using $python as it is (LAMINAR_GPU_PYTHON)"
else
  python="$venv/bin/python"
  stamp=$venv/.laminar-stamp
  want="$(sha256sum "$lock" | cut -c1-16) $(uname -m)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    /usr/bin/python3 -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] < (3, 15))' ||
      { say "/usr/bin/python3 is $(/usr/bin/python3 --version 2>&1); vllm 0.32.0 needs 3.11 to 3.14 (or set LAMINAR_GPU_PYTHON)"; exit $EXIT_ENVIRONMENT; }
    [ "$(uname -m)" = x86_64 ] || { say "the pins in $lock are for x86_64, not $(uname -m)"; exit $EXIT_ENVIRONMENT; }
    source_args=()
    if [ -n "${LAMINAR_GPU_WHEELHOUSE:-}" ]; then
      source_args=(--no-index --find-links "$LAMINAR_GPU_WHEELHOUSE")
      say "building $venv from the wheels in $LAMINAR_GPU_WHEELHOUSE"
    else
      say "building $venv from PyPI (vllm 0.32.0, torch 2.13.0 with CUDA; several GB the first time)"
    fi
    log=$venv.log
    if ! {
      { [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"; } &&
        "$venv/bin/python" -m pip install --disable-pip-version-check --no-deps "${source_args[@]}" -r "$lock" &&
        "$venv/bin/python" -m pip install --disable-pip-version-check --no-deps --no-build-isolation -e python
    } >"$log" 2>&1; then
      say "could not build $venv: $(tail -n 3 "$log" | tr '\n' ' ')"
      say "the whole log: $log. Without PyPI: LAMINAR_GPU_WHEELHOUSE=DIR (wheels of $lock), or LAMINAR_GPU_PYTHON=an interpreter that has torch (CUDA) and vllm"
      exit $EXIT_ENVIRONMENT
    fi
    echo "$want" >"$stamp"
  fi
fi

exec timeout --kill-after=30 600 "$python" python/tools/gpu_check "$@"
