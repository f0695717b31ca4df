"""The count of rejections by error code (what `laminar_data_rejections_total{code}` counts on
the TypeScript side), as a read-only mapping ``code -> count``."""

from __future__ import annotations

from typing import Dict, Iterator, Mapping, TypeVar

from ..errors import LaminarError

E = TypeVar("E", bound=BaseException)


class RejectionCounter(Mapping[str, int]):
    """Rejections by stable code: ``counter[error_codes.LENGTH_MISMATCH]`` (0 when none)."""

    def __init__(self) -> None:
        self._counts: Dict[str, int] = {}

    def record(self, err: E) -> E:
        """Counts `err` when it is a LaminarError and returns it, for ``raise counter.record(err)``."""
        if isinstance(err, LaminarError):
            self._counts[err.code] = self._counts.get(err.code, 0) + 1
        return err

    def __getitem__(self, code: str) -> int:
        return self._counts.get(code, 0)

    def __iter__(self) -> Iterator[str]:
        return iter(dict(self._counts))

    def __len__(self) -> int:
        return len(self._counts)

    def total(self) -> int:
        return sum(self._counts.values())

    def __repr__(self) -> str:
        return f"RejectionCounter({self._counts!r})"
