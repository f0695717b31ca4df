"""Ids in subjects, as src/data/ids.ts: NATS subject tokens cannot hold '.', '*', '>' or spaces,
so a trajectory id becomes one subject token through base64url of its UTF-8 bytes, without
padding (reversible, so that per-id subjects are exact)."""

from __future__ import annotations

import base64
import json
import re

from .. import error_codes
from .errors import DataInputError

MAX_ID_BYTES = 256
"""Longest id (UTF-8 bytes) of a trajectory, prompt or group."""

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def id_token(id: str) -> str:
    """The subject token of an id: base64url of its UTF-8 bytes, no padding."""
    return base64.urlsafe_b64encode(id.encode("utf-8")).rstrip(b"=").decode("ascii")


def token_to_id(token: str) -> str:
    """The id a subject token names (the inverse of `id_token`)."""
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("utf-8")


def trajectory_id_of_subject(subject: str) -> str:
    """The trajectory id of a per-id subject (an experience record or chunk)."""
    return token_to_id(subject[subject.rfind(".") + 1 :])


def check_name(kind: str, name: object) -> str:
    """Checks the name of a buffer: it becomes part of stream and subject names."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        # Quoted as JSON.stringify quotes it, so that the message reads the same in both languages.
        shown = json.dumps(name, ensure_ascii=False) if isinstance(name, str) else repr(name)
        raise DataInputError(error_codes.BAD_DATA_OPTIONS, f"{kind} name must be 1-64 characters of [A-Za-z0-9_-], got {shown}")
    return name
