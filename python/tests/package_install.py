"""The Python package as a user gets it, for test_package.py: a wheel built from a copy of
``python/``, installed (not editable) into a scratch virtual environment, offline.

- The wheel is built from a copy without the source tree's build leftovers (``python/build/lib``
  keeps modules that ``src/`` no longer has, and setuptools would ship them), with
  ``--no-build-isolation`` (this environment's setuptools, no download) and ``--no-index``.
- The scratch environment is made as scripts/bootstrap.sh makes ``.venv``: Debian's interpreter
  with its system site packages, which give numpy and the CPU torch.
- The PyPI dependencies come from a wheelhouse of this environment's own installed distributions,
  repacked as wheels from their RECORD. pip resolves the wheel's declared requirements against it
  with ``--no-index --isolated``: the install needs no network (a fresh CI machine has just filled
  ``.venv`` from PyPI; a developer's offline laptop has too), takes seconds, ignores pip
  configuration such as ``PIP_FIND_LINKS``, and installs only what the package declares, so a
  module it imports without declaring is missing there (unless Debian's packages have it, which
  test_package.py checks by reading the imports).
"""

from __future__ import annotations

import base64
import email.message
import email.parser
import hashlib
import importlib.metadata
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from packaging.requirements import Requirement

PYTHON_DIR = Path(__file__).resolve().parents[1]
#: What a build leaves in the source tree, which a fresh clone does not have.
BUILD_LEFTOVERS = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".pytest_cache")
#: Files of an installed distribution that its installer wrote, not its wheel.
INSTALLER_FILES = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them (``nats_py`` and ``Nats.Py`` are ``nats-py``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pip(*args: str, python: Optional[str] = None) -> List[str]:
    """This environment's pip, isolated from pip configuration and environment variables, acting on
    ``python``'s environment (default: this one)."""
    target = [] if python is None else ["--python", python]
    return [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", *target, *args]


def run(argv: List[str], what: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def build_wheel(dest: Path, source: Path = PYTHON_DIR) -> Path:
    """Builds the wheel of ``source`` (a copy of it, without build leftovers) into ``dest``."""
    copy = dest / "source"
    shutil.copytree(source, copy, ignore=BUILD_LEFTOVERS)
    out = dest / "wheel"
    run(pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", str(copy), "-w", str(out)), "building the wheel")
    (wheel,) = out.glob("laminar-*.whl")
    return wheel


def wheel_metadata(wheel: Path) -> email.message.Message:
    """A wheel's METADATA: its headers, and the long description (the README) as the body."""
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(z.read(name).decode())


def wheel_requirements(wheel: Path) -> List[Requirement]:
    """The Requires-Dist lines of a wheel's METADATA."""
    return [Requirement(r) for r in wheel_metadata(wheel).get_all("Requires-Dist") or []]


def applies(req: Requirement, extras: Iterable[str]) -> bool:
    """Whether ``req`` is wanted here with ``extras`` (its marker evaluated for this interpreter)."""
    if req.marker is None:
        return True
    return any(req.marker.evaluate({"extra": extra}) for extra in ["", *extras])


def own_distributions() -> Dict[str, importlib.metadata.Distribution]:
    """The distributions installed in this environment's own site-packages (not the system's)."""
    paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    return {canonical(d.metadata["Name"]): d for d in importlib.metadata.distributions(path=paths)}


def repack(dist: importlib.metadata.Distribution, dest: Path) -> Path:
    """A wheel of an installed distribution: the files its RECORD lists inside site-packages (its
    scripts are left out; pip writes entry points again) and a new RECORD."""
    wheel_info = dist.read_text("WHEEL")
    if wheel_info is None:
        raise RuntimeError(f"{dist.metadata['Name']} was not installed from a wheel: no WHEEL file to repack it by")
    tag = next(line.split(":", 1)[1].strip() for line in wheel_info.splitlines() if line.startswith("Tag:"))
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    path = dest / f"{name}-{dist.version}-{tag}.whl"
    record: List[str] = []
    info_dir = ""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for file in dist.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue
            if file.parts[0].endswith(".dist-info"):
                info_dir = file.parts[0]
                if file.name in INSTALLER_FILES:
                    continue
            data = Path(str(dist.locate_file(file))).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            z.writestr(file.as_posix(), data)
            record.append(f"{file.as_posix()},sha256={digest},{len(data)}")
        record.append(f"{info_dir}/RECORD,,")
        z.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")
    return path


def wheelhouse(wheel: Path, extras: Iterable[str], dest: Path) -> Path:
    """Repacks into ``dest`` every distribution of this environment that the wheel's requirements
    (with ``extras``) reach, transitively. Those Debian provides through the system site packages
    stay there (pip finds them installed); one found nowhere is left for pip to report."""
    dest.mkdir(parents=True, exist_ok=True)
    own = own_distributions()
    todo = [r for r in wheel_requirements(wheel) if applies(r, extras)]
    seen = set()
    while todo:
        name = canonical(todo.pop().name)
        if name in seen or name not in own:
            continue
        seen.add(name)
        repack(own[name], dest)
        todo.extend(r for r in map(Requirement, own[name].requires or []) if applies(r, []))
    return dest


def make_venv(path: Path) -> str:
    """A virtual environment as the bootstrap makes .venv (system site packages); its python.
    Without pip of its own: this environment's pip installs into it (``pip --python``)."""
    base = getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", "--system-site-packages", "--without-pip", str(path)], "creating the scratch environment")
    return str(path / "bin" / "python")


def install(python: str, wheel: Path, extras: List[str], house: Path) -> None:
    """Installs the wheel with ``extras`` into ``python``'s environment from ``house`` alone."""
    target = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
    run(pip("install", "--no-index", "--find-links", str(house), target, python=python), "installing the wheel")
