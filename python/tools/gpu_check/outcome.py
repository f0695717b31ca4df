"""What a part of the GPU check answers, and the exits the check ends with.

A part passes, fails (a check it ran did not hold) or is skipped with a stated reason (e.g. a
pinned-memory measurement on a machine without CUDA). A missing prerequisite (no CUDA device when
one is required, no vLLM, no relay CLI) is not a failure of laminar: it ends the check with an
exit code of its own, so a wrapper tells "laminar is broken" from "this machine cannot run it".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

#: Every part that ran passed (skipped measurements say why in the table).
EXIT_PASSED = 0
#: A check failed: laminar (or vLLM with laminar's extension) misbehaved on this machine.
EXIT_FAILED = 1
#: The command line is wrong (argparse's own code).
EXIT_USAGE = 2
#: No CUDA device, and the check was asked to require one (the default; `--cpu` runs without).
EXIT_NO_GPU = 3
#: A prerequisite is missing: vLLM not importable, relay CLI or native addon not built, node not found.
EXIT_ENVIRONMENT = 4


class CheckFailed(Exception):
    """A check did not hold: the message says what was expected and what was found."""


class EnvironmentMissing(Exception):
    """Something this machine lacks for a part (exit EXIT_ENVIRONMENT): the message says what to do."""


@dataclass
class PartResult:
    """One part's outcome: its table rows and its figures for the JSON line."""

    name: str
    status: str = "passed"  # passed | failed | skipped
    #: ``(what, value, note)`` rows for the printed table and the recorded section.
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    #: Figures for the JSON line (numbers, strings, None).
    figures: dict[str, Any] = field(default_factory=dict)
    reason: Optional[str] = None

    def row(self, what: str, value: str, note: str = "") -> None:
        self.rows.append((what, value, note))

    def fail(self, reason: str) -> "PartResult":
        self.status, self.reason = "failed", reason
        return self

    def skip(self, reason: str) -> "PartResult":
        self.status, self.reason = "skipped", reason
        return self
