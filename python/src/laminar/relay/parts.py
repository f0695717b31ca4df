"""A version published from several trainer hosts: the metadata that makes a local publication
one part of it. Each host publishes its own tensors into the forwarding relay on its host
(``laminar relay --forward``) with ``publish(..., part=(k, n), manifest=every_spec)``; the
forwarding relay pushes them to the master as part k of n, and the master serves the version once
every part is in (src/relay/parts/ in the TypeScript package; the keys are read by
src/relay/parts/part-metadata.ts)."""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from .. import error_codes
from ..errors import LaminarError

PART_KEY = "laminar.part"
MANIFEST_KEY = "laminar.manifest"
MAX_PARTS = 1024


def part_metadata(part: tuple[int, int], manifest: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """``part``: (k, n), this host's part k (from 1) of n; ``manifest``: every tensor of the
    version, in the version's order, as wire specs ({name, dtype, shape}), the same on every
    host."""
    try:
        k, n = (int(x) for x in part)
    except (TypeError, ValueError):
        raise LaminarError(error_codes.INVALID_ARG, f"part is (k, n), got {part!r}") from None
    if not 1 <= k <= n <= MAX_PARTS:
        raise LaminarError(error_codes.INVALID_ARG, f"part is (k, n) with 1 <= k <= n <= {MAX_PARTS}, got {part!r}")
    entries = [[s["name"], s["dtype"], s["shape"]] for s in manifest]
    if not entries:
        raise LaminarError(error_codes.INVALID_ARG, "the manifest lists no tensor")
    return {PART_KEY: f"{k}/{n}", MANIFEST_KEY: json.dumps(entries, separators=(",", ":"))}
