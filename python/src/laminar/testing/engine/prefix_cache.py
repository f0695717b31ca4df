"""The reference engine's prefix cache: the KV of finished sequences, kept for the next request
that starts with the same tokens (SGLang's radix cache, at token granularity, over whole slots).

A finished sequence leaves its slot here as an entry: its tokens (those whose keys and values the
slot holds) and the adapter it ran with. A new request looks up the entry sharing the longest
common prefix with its input (same adapter only: an adapter changes the keys and values); the
scheduler then either takes the entry's slot over (the request extends the whole entry, as the
next turn of a multi-turn trajectory does) or copies the shared prefix into a fresh slot (a partial
match: GRPO siblings of one prompt, another branch of a conversation). Either way only the suffix
is prefilled.

Entries hold token budget and slots that live requests may need: the scheduler evicts the least
recently used ones first, before it makes a request wait. The cache holds no tensor itself: the
keys and values stay in the KV cache's slots; this is the bookkeeping of which slot holds what.
Every method runs on the event loop's thread.

The bookkeeping is paid at every admission and every finish, so it must stay small beside a model
step (on the bench's tiny model, a step is about a millisecond). An entry's tokens are kept as
bytes (fixed-width ids), and each adapter's entries in sorted order: the entry sharing the longest
prefix with a request is one of the two next to it in that order (for any strings, the longest
common prefix with a set of them is reached at a neighbour in sorted order), so a lookup is a
binary search and two comparisons, not a pass over every entry; a whole-entry hit is a dict
lookup; dropping the entries a new one covers is a `startswith` per entry of its adapter.
"""

from __future__ import annotations

import bisect
import collections
from array import array
from dataclasses import dataclass
from typing import Optional

import numpy as np

_WIDTH = array("i").itemsize
"""Bytes per token id in an entry's key (a C int: numpy's `intc`)."""


def token_bytes(tokens: list[int]) -> bytes:
    """Token ids as fixed-width bytes: byte strings compare (and share prefixes) as the id lists do,
    up to the width (a shared prefix of b bytes is b // _WIDTH shared ids)."""
    return array("i", tokens).tobytes()


@dataclass
class CachedPrefix:
    """One finished sequence's KV, kept in `slot`: the keys and values of its tokens (`key`), in order."""

    adapter: Optional[str]
    key: bytes
    slot: int

    def __len__(self) -> int:
        return len(self.key) // _WIDTH

    @property
    def tokens(self) -> list[int]:
        return array("i", self.key).tolist()


@dataclass(frozen=True)
class PrefixMatch:
    """The entry sharing the longest prefix with a request, and how many tokens it shares."""

    entry: CachedPrefix
    length: int

    @property
    def whole(self) -> bool:
        """The request extends the whole entry (it may take the entry's slot over, no copy)."""
        return self.length == len(self.entry)


def common_prefix_length(a: bytes, b: bytes) -> int:
    """Token ids two keys share at their start."""
    n = min(len(a), len(b)) // _WIDTH
    x = np.frombuffer(a, dtype=np.intc, count=n)
    y = np.frombuffer(b, dtype=np.intc, count=n)
    differ = np.flatnonzero(x != y)
    return int(differ[0]) if differ.size else n


class PrefixCache:
    """Cached prefixes in least-recently-used order, and the tokens they hold in all."""

    def __init__(self) -> None:
        self._entries: collections.OrderedDict[int, CachedPrefix] = collections.OrderedDict()
        """By slot, least recently used first."""
        self._sorted: dict[Optional[str], list[bytes]] = {}
        """Each adapter's entry keys in sorted order."""
        self._by_key: dict[tuple[Optional[str], bytes], CachedPrefix] = {}
        """The entries by adapter and key (keys of one adapter are unique: see `insert`)."""
        self.tokens = 0
        """Tokens held by all entries (evictable: they count in no request's reservation)."""

    def __len__(self) -> int:
        return len(self._entries)

    def match(self, adapter: Optional[str], input_ids: list[int]) -> Optional[PrefixMatch]:
        """The longest shared prefix of `input_ids` with an entry of the same adapter, leaving at
        least the last input token to prefill (its logits give the first output token); None when
        nothing is shared. Of entries that share as much, one the request extends whole (its slot
        is taken over, no copy)."""
        keys = self._sorted.get(adapter)
        if not keys or len(input_ids) < 2:
            return None
        query = token_bytes(input_ids[:-1])
        at = bisect.bisect_left(keys, query)
        best, length = None, 0
        for neighbour in keys[max(at - 1, 0) : at + 1]:
            shared = common_prefix_length(neighbour, query)
            if shared > length:
                best, length = neighbour, shared
        if best is None:
            return None
        whole = self._by_key.get((adapter, query[: length * _WIDTH]))
        return PrefixMatch(whole if whole is not None else self._by_key[(adapter, best)], length)

    def touch(self, entry: CachedPrefix) -> None:
        self._entries.move_to_end(entry.slot)

    def insert(self, adapter: Optional[str], tokens: list[int], slot: int) -> list[int]:
        """Keeps `slot` holding `tokens` as the most recently used entry. Entries of the same
        adapter that are a prefix of `tokens` (or equal to them) are dropped (the new one serves
        every match they would); returns their slots, free again."""
        key = token_bytes(tokens)
        redundant = [self._by_key[(adapter, k)].slot for k in self._sorted.get(adapter, ()) if key.startswith(k)]
        for s in redundant:
            self.remove(self._entries[s])
        entry = CachedPrefix(adapter, key, slot)
        self._entries[slot] = entry
        self._by_key[(adapter, key)] = entry
        bisect.insort(self._sorted.setdefault(adapter, []), key)  # after the removals: they may drop the adapter's list
        self.tokens += len(entry)
        return redundant

    def remove(self, entry: CachedPrefix) -> int:
        """Drops an entry (taken over by a request, or evicted); returns its slot."""
        del self._entries[entry.slot]
        del self._by_key[(entry.adapter, entry.key)]
        keys = self._sorted[entry.adapter]
        del keys[bisect.bisect_left(keys, entry.key)]
        if not keys:
            del self._sorted[entry.adapter]
        self.tokens -= len(entry)
        return entry.slot

    def least_recent(self, keep: Optional[CachedPrefix] = None) -> Optional[CachedPrefix]:
        """The entry to evict next (never `keep`, the one a request is about to read)."""
        return next((e for e in self._entries.values() if e is not keep), None)

    def clear(self) -> list[int]:
        """Drops every entry (new weights: KV of the old ones must never be read); their slots."""
        return [self.remove(e) for e in list(self._entries.values())]

    def drop_adapter(self, adapter: str) -> list[int]:
        """Drops the entries of one adapter (unloaded, or loaded again with other weights); their slots."""
        return [self.remove(e) for e in list(self._entries.values()) if e.adapter == adapter]
