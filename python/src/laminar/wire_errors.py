"""Errors that arrive on the wire (``{code, message, details?}`` in a relay's or the sampler
service's error frame) as exceptions of the class the code has everywhere
(``laminar.error_classes``, generated with the catalogue)."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Type

from . import error_codes
from .errors import LaminarError


def error_from_wire(body: Any, *, sender: str, fallback: Type[LaminarError] = LaminarError) -> LaminarError:
    """``body`` as the exception of its code's class, or ``fallback`` for a code with none.
    ``sender`` ("the relay") names who sent it in the message of a body that is not one."""
    if not isinstance(body, Mapping):
        return LaminarError(error_codes.BAD_FRAME, f"{sender} sent an error without a body")
    code = body.get("code") if isinstance(body.get("code"), str) else error_codes.INTERNAL
    message = body.get("message") if isinstance(body.get("message"), str) else f"{sender} sent an error without a message"
    details = body.get("details") if isinstance(body.get("details"), Mapping) else None
    # Imported here: the table names laminar.data's classes, and laminar.data imports this module.
    from .error_classes import EXCEPTION_CLASSES

    return _with_code(EXCEPTION_CLASSES.get(code, fallback), code, message, details)


def _with_code(cls: Type[LaminarError], code: str, message: str, details: Optional[Mapping[str, Any]]) -> LaminarError:
    # Some classes fix their code and take only (message, details) (ClosedError,
    # LaminarTimeoutError, StoreError); building through the base initialiser serves all alike.
    err = cls.__new__(cls, message)
    LaminarError.__init__(err, code, message, details)
    return err
