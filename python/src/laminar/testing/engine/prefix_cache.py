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
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Optional

import numpy as np


@dataclass
class CachedPrefix:
    """One finished sequence's KV, kept in `slot`: the keys and values of `tokens`, in order."""

    adapter: Optional[str]
    tokens: np.ndarray
    slot: int

    def __len__(self) -> int:
        return int(self.tokens.shape[0])


@dataclass(frozen=True)
class PrefixMatch:
    """The entry sharing the longest prefix with a request, and how many tokens it shares."""

    entry: CachedPrefix
    length: int

    @property
    def whole(self) -> bool:
        """The request extends the whole entry (it may take the entry's slot over, no copy)."""
        return self.length == len(self.entry)


def common_prefix_length(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.shape[0], b.shape[0])
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


class PrefixCache:
    """Cached prefixes in least-recently-used order, and the tokens they hold in all."""

    def __init__(self) -> None:
        self._entries: collections.OrderedDict[int, CachedPrefix] = collections.OrderedDict()
        """By slot, least recently used first."""
        self.tokens = 0
        """Tokens held by all entries (evictable: they count in no request's reservation)."""

    def __len__(self) -> int:
        return len(self._entries)

    def match(self, adapter: Optional[str], input_ids: list[int]) -> Optional[PrefixMatch]:
        """The longest shared prefix of `input_ids` with an entry of the same adapter, leaving at
        least the last input token to prefill (its logits give the first output token); None when
        nothing is shared."""
        if not self._entries or len(input_ids) < 2:
            return None
        ids = np.asarray(input_ids[:-1], dtype=np.int64)
        best: Optional[PrefixMatch] = None
        for entry in self._entries.values():
            if entry.adapter != adapter:
                continue
            length = common_prefix_length(entry.tokens, ids)
            if length > 0 and (best is None or length > best.length):
                best = PrefixMatch(entry, length)
        return best

    def touch(self, entry: CachedPrefix) -> None:
        self._entries.move_to_end(entry.slot)

    def insert(self, adapter: Optional[str], tokens: list[int], slot: int) -> list[int]:
        """Keeps `slot` holding `tokens` as the most recently used entry. Entries of the same
        adapter that are a prefix of `tokens` are dropped (the new one serves every match they
        would); returns their slots, free again."""
        array = np.asarray(tokens, dtype=np.int64)
        redundant = [
            e.slot for e in self._entries.values() if e.adapter == adapter and len(e) <= len(array) and common_prefix_length(e.tokens, array) == len(e)
        ]
        for s in redundant:
            self.remove(self._entries[s])
        self._entries[slot] = CachedPrefix(adapter, array, slot)
        self.tokens += len(array)
        return redundant

    def remove(self, entry: CachedPrefix) -> int:
        """Drops an entry (taken over by a request, or evicted); returns its slot."""
        del self._entries[entry.slot]
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
