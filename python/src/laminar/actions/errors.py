"""What a handler raises for arguments it cannot take (status ``bad_call``)."""

from __future__ import annotations

from .. import error_codes
from ..errors import LaminarError


class ActionArgumentError(LaminarError):
    """Arguments of the wrong shape or type: the result has status ``bad_call`` and code ERR_ACTION_BAD_ARGS."""

    def __init__(self, message: str) -> None:
        super().__init__(error_codes.ACTION_BAD_ARGS, message)
