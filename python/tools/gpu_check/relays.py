"""Relays for the GPU check: ``laminar relay`` from dist/, started and removed the way the Python
tests do it (python/tests/relay_process.py, reused as is: a fresh directory under /dev/shm, the
relay killed and the directory removed at the end)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from outcome import EnvironmentMissing

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "python" / "tests"))

from relay_process import CLI, DEFAULT_ARGS, RelayFactory  # noqa: E402

#: The native addon the relay maps its segments with (node-gyp's output).
ADDON = REPO / "build" / "Release" / "laminar_native.node"


def require_relay_cli() -> None:
    """The relay is the Node CLI: node on PATH and dist/ built, else EnvironmentMissing."""
    if shutil.which("node") is None:
        raise EnvironmentMissing("node is not on PATH: the relay is `laminar relay` (Node 20); install Node and run `bash scripts/bootstrap.sh`")
    if not CLI.exists():
        raise EnvironmentMissing(f"{CLI} is missing: run `bash scripts/bootstrap.sh` (or `npx tsc -p tsconfig.json`)")
    if not ADDON.exists():
        # The relay would exit at once with ERR_NATIVE_MISSING (also while a rebuild is under way).
        raise EnvironmentMissing(f"{ADDON} is missing: run `bash scripts/bootstrap.sh` (or `npx node-gyp rebuild`)")


def _alive(relay: Any) -> Any:
    """The relay, if it still runs and its socket is there; else RuntimeError with its last log
    lines (a relay that exits right after "relay ready" would otherwise show only as ENOENT)."""
    if relay.process.poll() is not None or not os.path.exists(relay.socket_path):
        state = "running" if relay.process.poll() is None else f"exited with {relay.process.returncode}"
        raise RuntimeError(
            f"the relay at {relay.socket_path} is gone ({state}, socket {'there' if os.path.exists(relay.socket_path) else 'missing'}):\n"
            + "\n".join(list(relay.logs)[-20:])
        )
    return relay


class Relays:
    """Starts relays on demand; ``close()`` kills them and removes their shared memory."""

    def __init__(self) -> None:
        self._factory = RelayFactory()
        self._plain: Optional[Any] = None

    def start(self, extra_args: Sequence[str] = ()) -> Any:
        """A relay with the tests' default arguments and ``extra_args``; one without extra
        arguments is started once and shared by the parts that need nothing more."""
        require_relay_cli()
        if extra_args:
            return _alive(self._factory([*DEFAULT_ARGS, *extra_args]))
        if self._plain is None:
            self._plain = self._factory(DEFAULT_ARGS)
        return _alive(self._plain)

    def close(self) -> None:
        self._factory.cleanup()

    def __enter__(self) -> "Relays":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
