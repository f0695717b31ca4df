"""Errors raised by the Python client: one class, `LaminarError`, with the stable `code` of the
catalogue (`laminar.error_codes`, generated from the TypeScript side's), so that Python code
switches on the same codes as TypeScript code, metrics and logs. A code received on the wire is
raised as the class `laminar.error_classes` gives it (generated with the catalogue), the same on
every path: ERR_TIMEOUT is a `LaminarTimeoutError`, which is also a builtin `TimeoutError`.

    try:
        lease = relay.acquire("policy", at_least=7, timeout=0)
    except LaminarError as err:
        if err.code == error_codes.NO_VERSION: ...
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from . import error_codes


class LaminarError(Exception):
    """An error with a stable `code` (``ERR_...``, an errno name, or a UCX status name)."""

    def __init__(self, code: str, message: str, details: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: Optional[dict[str, Any]] = dict(details) if details is not None else None

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"

    def __reduce__(self):  # picklable across multiprocessing, like any exception
        return (type(self), (self.code, self.message, self.details))


class RelayError(LaminarError):
    """An error the relay returned for a request, with the relay's code, when the code has no
    class of its own (``laminar.error_classes``: ERR_TIMEOUT is a ``LaminarTimeoutError``)."""


class ClosedError(LaminarError):
    """The connection (or the object) is closed, or the peer went away."""

    def __init__(self, message: str = "the connection is closed", details: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(error_codes.CLOSED, message, details)

    def __reduce__(self):
        return (type(self), (self.message, self.details))


class LaminarTimeoutError(LaminarError, TimeoutError):
    """An operation did not finish within its deadline (also a builtin ``TimeoutError``)."""

    def __init__(self, message: str, details: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(error_codes.TIMEOUT, message, details)

    def __reduce__(self):
        return (type(self), (self.message, self.details))
