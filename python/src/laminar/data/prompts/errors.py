"""Errors of the prompt pool that the data module's errors (laminar.data.errors) have no class for
yet: the same classes as src/data/errors.ts's OwnershipError and DataNotFoundError."""

from __future__ import annotations

from ...errors import LaminarError


class OwnershipError(LaminarError):
    """Someone else holds (or took) the item: ERR_LEASE_LOST."""


class DataNotFoundError(LaminarError):
    """No such item: ERR_UNKNOWN_CLAIM."""
