"""Errors of the data module, the same classes (and codes) as src/data/errors.ts.

Every rejection carries a stable code from `laminar.error_codes`, so that Python code switches
on the same codes as TypeScript code:

    try:
        await writer.write(t)
    except DataInputError as err:   # err.code == error_codes.LENGTH_MISMATCH, ...
        ...
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .. import error_codes
from ..errors import LaminarError


class DataInputError(LaminarError):
    """A trajectory or an option that does not satisfy its schema or an invariant."""


class DataCapacityError(LaminarError):
    """The buffer or a payload is over a configured limit (ERR_PAYLOAD_TOO_LARGE, ERR_BUFFER_FULL)."""


class StoreError(LaminarError):
    """Redis or JetStream failed underneath (ERR_STORE); the original exception is ``__cause__``.
    The code is a more precise one of the same kind where there is one (ERR_NOT_REPLICATED: a
    prompt-pool write the Redis replicas did not acknowledge)."""

    def __init__(self, message: str, details: Optional[Mapping[str, Any]] = None, code: str = error_codes.STORE) -> None:
        super().__init__(code, message, details)

    def __reduce__(self):
        return (type(self), (self.message, self.details, self.code))


class CorruptRecordError(LaminarError):
    """A stored record that cannot be decoded as a v1 experience record (ERR_CORRUPT_RECORD)."""

    def __init__(self, message: str, details: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(error_codes.CORRUPT_RECORD, message, details)

    def __reduce__(self):
        return (type(self), (self.message, self.details))
