"""The Python package as a user installs it (as test/package/ checks the npm package): a wheel
built from python/, installed with its extras into a scratch virtual environment
(package_install.py says how, offline), and used from a directory outside the source tree, so
that the sources cannot stand in for what the wheel lacks. A readme pyproject.toml names but the
tree lacks (python/README.md once), a module the wheel leaves out, a dependency the package
imports without declaring, or an extra that cannot be installed next to Debian's torch fails
here; and the user's side runs for real: a script publishes and acquires through a relay
and claims from the prompt pool, and the GRPO example (python/examples/grpo_digits/) trains
against a relay, nats-server and the sampler service.

The wheel and the environment are made once per run, whichever xdist worker gets there first
(a file lock; the other waits and reuses them)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
from packaging.requirements import Requirement

import package_install
from relay_process import remove_shm_dir
from sampler_service import SamplerService

pytestmark = pytest.mark.timeout(300)

TESTS = Path(__file__).resolve().parent
SOURCE = TESTS.parent / "src" / "laminar"
EXAMPLES = TESTS.parent / "examples"
#: The extras the examples and the reference engine need (verl's is left out: verl brings torch 2).
EXTRAS = ["torch", "safetensors", "engine"]
#: Modules the package imports that the program loading it provides: the vLLM worker extension is
#: imported by vLLM's workers, and imports vllm only there.
HOST_PROVIDED = {"vllm"}


@dataclass(frozen=True)
class Installed:
    """The scratch environment: its interpreter and the wheel in it, and a place outside the
    source tree holding a copy of python/examples/."""

    python: str
    site_packages: Path
    wheel: Path
    examples: Path


def _make(root: Path) -> Installed:
    wheel = package_install.build_wheel(root)
    house = package_install.wheelhouse(wheel, EXTRAS, root / "wheelhouse")
    python = package_install.make_venv(root / "venv")
    package_install.install(python, wheel, EXTRAS, house)
    shutil.rmtree(house)  # pytest keeps the last three runs' temp dirs: only what the tests use
    shutil.rmtree(root / "source")
    site_packages = Path(
        subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
    )
    examples = root / "examples"
    shutil.copytree(EXAMPLES, examples, ignore=package_install.BUILD_LEFTOVERS)
    shutil.copy(TESTS / "package_probe.py", root / "package_probe.py")
    return Installed(python, site_packages, wheel, examples)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Built once per run: under the run's shared temp dir with xdist (each worker's basetemp is
    a child of it), under this process's own without."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "laminar-package"
    root.mkdir(exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = root / "installed.json"
        if made.exists():
            saved = json.loads(made.read_text())
            return Installed(saved["python"], Path(saved["site_packages"]), Path(saved["wheel"]), Path(saved["examples"]))
        for leftover in root.iterdir():  # of a worker that failed half-way before this one
            if leftover.is_dir():
                shutil.rmtree(leftover)
        result = _make(root)
        made.write_text(json.dumps({k: str(v) for k, v in result.__dict__.items()}))
        return result


def user_env() -> Dict[str, str]:
    """The environment of a user's shell: nothing that would lead Python back to the source tree
    or to this test's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def run_user(installed: Installed, argv: List[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs ``python argv...`` of the scratch environment in ``cwd``; fails on a non-zero exit."""
    done = subprocess.run([installed.python, *argv], cwd=cwd, env=user_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def probe(installed: Installed, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """package_probe.py's findings in the scratch environment."""
    out = run_user(installed, [str(installed.examples.parent / "package_probe.py")], tmp_path_factory.mktemp("probe")).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_the_wheel_describes_the_package_with_its_readme(installed: Installed) -> None:
    # The readme pyproject.toml names, missing (as python/README.md once was): setuptools only
    # warns, and builds a wheel without a description.
    metadata = package_install.wheel_metadata(installed.wheel)
    readme = (package_install.PYTHON_DIR / "README.md").read_text()
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_payload().strip() == readme.strip()


def test_laminar_comes_from_the_installed_wheel_whole(installed: Installed, probe: Dict[str, Any]) -> None:
    package = installed.site_packages / "laminar"
    assert Path(probe["file"]) == package / "__init__.py"
    # Installed from the wheel's archive, not as a link to the source tree (an editable install).
    assert probe["direct_url"]["url"].endswith(installed.wheel.name) and "archive_info" in probe["direct_url"]
    # Every source module and py.typed is in the wheel (package discovery and package data).
    shipped = {p.relative_to(package).as_posix() for p in package.rglob("*") if p.suffix in (".py", ".typed")}
    sources = {p.relative_to(SOURCE).as_posix() for p in SOURCE.rglob("*") if p.suffix in (".py", ".typed")}
    assert sources - shipped == set()
    assert "py.typed" in shipped


def test_every_module_imports_in_an_environment_of_the_declared_dependencies(probe: Dict[str, Any]) -> None:
    assert len(probe["modules"]) > 50
    assert probe["failed"] == {}


def test_every_import_is_a_declared_dependency(probe: Dict[str, Any]) -> None:
    """Debian's system packages (numpy, yaml, ...) are visible in the scratch environment, so an
    import that only they satisfy would pass the import test: this reads the imports instead."""
    requires = [Requirement(r) for r in probe["requires"]]
    declared = {package_install.canonical(r.name) for r in requires}
    core = {package_install.canonical(r.name) for r in requires if r.marker is None}

    def dists(top: str) -> set[str]:
        return set(probe["imports"][top]) or {package_install.canonical(top)}

    undeclared = {top for top in probe["imports"] if top not in HOST_PROVIDED and not dists(top) & declared}
    assert undeclared == set(), "imported but not in pyproject.toml's dependencies or extras"
    # What the client imports at the top of a module outside laminar.testing and
    # laminar.integrations, a plain `pip install laminar` must bring (torch is imported lazily).
    not_core = {top for top in probe["core_imports"] if not dists(top) & core}
    assert not_core == set(), "imported unconditionally by the client but only an extra's"
    assert {"msgpack", "nats", "numpy", "redis", "xxhash"} <= set(probe["core_imports"])


USER_SCRIPT = """
import json, sys
import numpy as np
import redis
import laminar
from laminar.data.prompts import PromptPool

relay_socket, redis_socket, prompts = sys.argv[1:4]
with laminar.RelayClient(relay_socket) as relay:
    relay.publish("package/model", 1, {"w": np.arange(8, dtype=np.float32)}).wait_visible(timeout=60)
    with relay.acquire("package/model", timeout=60) as lease:
        version, weights = lease.version, lease.numpy("w").tolist()
pool = PromptPool.open(redis.Redis(unix_socket_path=redis_socket), "package", default_group_size=2)
report = pool.load_jsonl(prompts)
(claim,) = pool.claim("rollout-0", count=1)
print(json.dumps({"laminar": laminar.__file__, "version": version, "weights": weights, "loaded": report.loaded,
                  "claimed": [claim.id, claim.n, claim.payload], "completed": str(pool.complete(claim))}))
"""


def test_a_user_script_publishes_and_acquires_through_a_relay_and_claims_a_prompt(installed: Installed, relay: Any, redis_socket: str, tmp_path: Path) -> None:
    (tmp_path / "user.py").write_text(USER_SCRIPT)
    (tmp_path / "prompts.jsonl").write_text(json.dumps({"id": "q1", "payload": {"text": "repeat 123"}}) + "\n")
    out = run_user(installed, ["user.py", relay.socket_path, redis_socket, "prompts.jsonl"], tmp_path).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["laminar"].startswith(str(installed.site_packages))
    assert (result["version"], result["weights"]) == (1, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    assert result["loaded"] == 1 and result["claimed"] == ["q1", 2, {"text": "repeat 123"}]
    assert "ok" in result["completed"]


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    d = tempfile.mkdtemp(prefix="laminar-py-package-", dir="/dev/shm")
    yield Path(d)
    remove_shm_dir(d)


def test_the_grpo_example_trains_from_the_installed_package(installed: Installed, nats_server: Any, relay_factory: Any, shm_dir: Path, tmp_path: Path) -> None:
    """The example's README, "Run it", with small numbers: engine files, a relay serving them, the
    sampler service, trainer.py for 3 steps and rollout_loop.py until version 3."""
    example = installed.examples / "grpo_digits"
    engine = tmp_path / "engine"
    run_user(installed, [str(example / "trainer.py"), "--engine-files", str(engine), "--engine-files-only"], tmp_path)
    relay = relay_factory(["--no-pin", "--engine-files", str(engine)])
    buffer = f"package{os.getpid()}"
    group, batch = 4, 8
    sampler = SamplerService(nats_server.url, str(shm_dir), ["--buffer", buffer, "--batch-size", str(batch), "--strategy", "groups", "--max-staleness", "4"])
    sampler.start()
    try:
        model = "digits/package"
        trainer = subprocess.Popen(
            [installed.python, str(example / "trainer.py"), "--relay-socket", relay.socket_path, "--sampler-socket", sampler.socket_path]
            + ["--model", model, "--steps", "3", "--metrics-out", str(tmp_path / "metrics.jsonl"), "--sample-timeout", "60"],
            cwd=tmp_path,
            env=user_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            rollout = run_user(
                installed,
                [str(example / "rollout_loop.py"), "--relay-socket", relay.socket_path, "--nats", nats_server.url, "--buffer", buffer]
                + ["--model", model, "--group-size", str(group), "--groups", str(batch // group), "--until-version", "3"],
                tmp_path,
                timeout=180,
            )
            trained, _ = trainer.communicate(timeout=120)
        finally:
            if trainer.poll() is None:
                trainer.kill()
                trainer.wait()
    finally:
        sampler.kill()
    assert trainer.returncode == 0, trained
    assert "done after 3 steps; last version 3" in trained
    assert "last version 3" in rollout.stdout
    steps = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [s["version"] for s in steps] == [1, 2, 3] and all(s["items"] == batch for s in steps)
