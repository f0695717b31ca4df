"""Run by the scratch environment's interpreter, from outside the source tree (test_package.py):
where laminar is imported from, which of its modules import, and where the package's imports come
from. Prints one JSON object; the test decides. Nothing here may need more than the standard
library and the package's own dependencies.

- ``file``, ``direct_url``: laminar's ``__init__.py`` (as the import system finds it) and how pip
  installed it.
- ``imports``: every top-level module any file of the package imports (at any depth: lazy imports
  of optional dependencies included), other than the standard library's and laminar's, each with
  the distributions that provide it here (none for one that is not installed).
- ``core_imports``: those that a module outside ``laminar.testing`` and ``laminar.integrations``
  (the subpackages that need extras) imports unconditionally, at its top level.
- ``failed``: the modules whose import raised, with the exception (every module but ``__main__``).
- ``requires``: laminar's requirements as its installed metadata states them.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata as metadata
import importlib.util
import json
import re
import sys
from pathlib import Path

#: Subpackages documented as needing extras (torch, safetensors, engine, verl).
OPTIONAL = ("laminar.testing", "laminar.integrations")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def third_party(name: str) -> bool:
    return name not in sys.stdlib_module_names and name not in ("laminar", "__future__", "__main__")


def imported(node: ast.AST) -> list[str]:
    """The third-party top-level modules an import statement names (none for other nodes)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        names = [node.module]
    else:
        return []
    return [top for top in (n.split(".")[0] for n in names) if third_party(top)]


def main() -> None:
    spec = importlib.util.find_spec("laminar")
    assert spec is not None and spec.origin is not None, "laminar is not importable"
    root = Path(spec.origin).parent
    sources = {}  # module name: file
    for f in sorted(root.rglob("*.py")):
        parts = ("laminar",) + f.relative_to(root).with_suffix("").parts
        sources[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    # A __main__ is a program, run by `python -m`: importing it would run it.
    modules = [m for m in sources if not m.endswith(".__main__")]
    providers = metadata.packages_distributions()
    imports: dict[str, list[str]] = {}
    core_imports: set[str] = set()
    for module, f in sources.items():
        tree = ast.parse(f.read_text(), str(f))
        for node in ast.walk(tree):
            for top in imported(node):
                imports[top] = sorted({canonical(d) for d in providers.get(top, [])})
                if node in tree.body and not module.startswith(OPTIONAL):
                    core_imports.add(top)

    failed = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - every failure is reported
            failed[name] = f"{type(err).__name__}: {err}"

    dist = metadata.distribution("laminar")
    print(
        json.dumps(
            {
                "file": spec.origin,
                "version": dist.version,
                "direct_url": json.loads(dist.read_text("direct_url.json") or "null"),
                "modules": modules,
                "imports": dict(sorted(imports.items())),
                "core_imports": sorted(core_imports),
                "failed": failed,
                "requires": dist.requires or [],
            }
        )
    )


if __name__ == "__main__":
    main()
