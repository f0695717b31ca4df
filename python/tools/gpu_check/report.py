"""The check's table, its JSON line, and the dated section ``--record`` appends to
docs/performance/gpu.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from outcome import PartResult

REPO = Path(__file__).resolve().parents[3]
RECORD = REPO / "docs" / "performance" / "gpu.md"


def table(parts: list[PartResult]) -> str:
    rows = [("part", "what", "value", "note")]
    for part in parts:
        for what, value, note in part.rows:
            rows.append((part.name, what, value, note))
        status = part.status if part.reason is None else f"{part.status}: {part.reason}"
        rows.append((part.name, "result", status.split("\n")[0], ""))
    return "\n".join("| " + " | ".join(cells) + " |" for cells in [rows[0], ("---",) * 4, *rows[1:]])


def json_line(environment: dict[str, Any], parts: list[PartResult]) -> str:
    return json.dumps(
        {"bench": "gpu-check", **environment, "parts": {p.name: {"status": p.status, "reason": p.reason, **p.figures} for p in parts}},
        separators=(",", ":"),
        default=str,
    )


def section(when: str, command: str, environment: dict[str, Any], parts: list[PartResult]) -> str:
    host = ", ".join(f"{k} {v}" for k, v in environment.items() if k not in ("mode",) and v is not None)
    return f"\n## {when}: {environment.get('mode')}\n\n`{command}`; {host}.\n\n{table(parts)}\n\n```json\n{json_line(environment, parts)}\n```\n"


def record(path: Path, text: str) -> None:
    """Appends a run's section (the page and its header exist: docs/performance/gpu.md)."""
    with open(path, "a", encoding="utf-8") as page:
        page.write(text)
