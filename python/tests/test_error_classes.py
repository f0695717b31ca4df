"""The one table from error code to exception class (laminar.error_classes, generated with the
catalogue by scripts/error-reference.mjs): every path that raises an error received on the wire
raises the class of its code, and each class is the builtin exception it means."""

from __future__ import annotations

import pickle

import pytest

from laminar import ClosedError, LaminarError, LaminarTimeoutError, RelayError, error_codes
from laminar.data import DataCapacityError
from laminar.error_classes import EXCEPTION_CLASSES
from laminar.wire_errors import error_from_wire


def test_every_code_in_the_table_is_in_the_catalogue():
    assert set(EXCEPTION_CLASSES) <= set(error_codes.CATALOGUE)
    assert all(issubclass(cls, LaminarError) for cls in EXCEPTION_CLASSES.values())


def test_a_timeout_is_a_builtin_timeout_error():
    assert EXCEPTION_CLASSES[error_codes.TIMEOUT] is LaminarTimeoutError
    assert issubclass(LaminarTimeoutError, TimeoutError)


@pytest.mark.parametrize("code", sorted(EXCEPTION_CLASSES))
@pytest.mark.parametrize("sender, fallback", [("the relay", RelayError), ("the sampler service", LaminarError)])
def test_a_wire_error_is_its_codes_class_from_every_sender(code, sender, fallback):
    err = error_from_wire({"code": code, "message": "why", "details": {"n": 1}}, sender=sender, fallback=fallback)
    assert type(err) is EXCEPTION_CLASSES[code]
    assert (err.code, err.message, err.details) == (code, "why", {"n": 1})
    again = pickle.loads(pickle.dumps(err))
    assert (type(again), again.code, again.message) == (type(err), code, "why")


def test_a_code_without_a_class_is_the_senders_own():
    relay = error_from_wire({"code": error_codes.UNKNOWN_VERSION, "message": "none"}, sender="the relay", fallback=RelayError)
    assert type(relay) is RelayError and relay.code == error_codes.UNKNOWN_VERSION
    service = error_from_wire({"code": error_codes.UNKNOWN_VERSION, "message": "none"}, sender="the sampler service")
    assert type(service) is LaminarError


def test_a_body_that_is_not_an_error_is_a_bad_frame():
    err = error_from_wire(["not", "a", "map"], sender="the relay", fallback=RelayError)
    assert err.code == error_codes.BAD_FRAME and "the relay" in err.message
    assert isinstance(error_from_wire({"code": error_codes.CLOSED}, sender="x"), ClosedError)
    assert isinstance(error_from_wire({"code": error_codes.BUFFER_FULL}, sender="x"), DataCapacityError)
