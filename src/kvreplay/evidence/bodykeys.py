"""Sets of sent bodies in flat memory: 16-byte keys in sorted numpy arrays (issue 32).

A body is named by its ``body_sha256`` (64 lowercase hex digits). A Python set of
a million such strings costs ~250 bytes a body (the 113-byte string, the set's
slot, a list and a frozenset copy beside it); ``KeySet`` keeps the first 16
bytes of each digest (128 bits, as the compact plan's seen-set did before) in a
sorted ``S16`` array: 16 bytes a body, membership by ``searchsorted``. A value
that is not 64 lowercase hex digits (an older run's odd record, None) is kept
as itself in a small Python set beside it, so such values compare exactly as
before and never equal a digest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["KEY", "DigestRows", "KeySet", "key_of", "member"]

KEY = np.dtype("S16")
"""A body's key: the first 16 bytes of its SHA-256 (fixed width: compared as 16 raw bytes)."""

_HEX64 = re.compile(r"[0-9a-f]{64}")


def key_of(h: Any) -> bytes | None:
    """The 16-byte key of a ``body_sha256`` value, or None when it is not 64 lowercase hex digits."""
    if type(h) is str and len(h) == 64 and _HEX64.fullmatch(h):
        return bytes.fromhex(h[:32])
    return None


def member(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """Per element of ``keys`` (``KEY``): whether it is in ``sorted_keys`` (``KEY``, sorted ascending)."""
    if not len(sorted_keys) or not len(keys):
        return np.zeros(len(keys), dtype=bool)
    idx = np.searchsorted(sorted_keys, keys)
    ok = idx < len(sorted_keys)
    ok[ok] = sorted_keys[idx[ok]] == keys[ok]
    return ok


def _merge(sorted_keys: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``sorted_keys`` with ``new`` (sorted, none of them present) inserted in order."""
    if not len(new):
        return sorted_keys
    return np.insert(sorted_keys, np.searchsorted(sorted_keys, new), new)


class DigestRows(Protocol):
    """Sequence entries held flat (``kvreplay.rundir.planfile.Entries``).

    ``digests``: 32 bytes of SHA-256 per entry; ``other``: entry index -> the
    entry's dict for entries not held flat (their 32 bytes are not a digest).
    """

    digests: bytes | bytearray
    other: dict[int, dict[str, Any]]


class KeySet:
    """A set of ``body_sha256`` values: hex digests as sorted 16-byte keys, any other value as itself.

    Attributes:
        keys: Sorted, unique ``KEY`` array of the hex digests' keys.
        odd: The values that are not 64 lowercase hex digits.
    """

    def __init__(self, keys: np.ndarray | None = None, odd: set[Any] | None = None) -> None:
        """A set of the sorted unique ``keys`` (empty: none) and the ``odd`` values."""
        self.keys = np.empty(0, dtype=KEY) if keys is None else keys
        self.odd: set[Any] = set() if odd is None else odd

    @classmethod
    def of(cls, hashes: Iterable[Any]) -> KeySet:
        """The set of ``hashes`` (``body_sha256`` values).

        Raises:
            TypeError: a value is unhashable (as a Python set would).
        """
        buf = bytearray()
        odd: set[Any] = set()
        for h in hashes:
            k = key_of(h)
            if k is None:
                odd.add(h)
            else:
                buf += k
        return cls(np.unique(np.frombuffer(buf, dtype=KEY)), odd)

    @classmethod
    def of_rows(cls, rows: DigestRows, digests: bytes | bytearray | None = None) -> KeySet:
        """The set of the ``body_sha256`` of flat entries (``DigestRows``), without a string per entry.

        ``digests``: ``rows.digests`` when already read (a file-backed ``Entries`` reads them
        from its file each time they are asked for).

        Raises:
            KeyError: an entry kept as its dict has no ``body_sha256``.
        """
        flat = np.frombuffer(rows.digests if digests is None else digests, dtype=np.uint8).reshape(-1, 32)
        if rows.other:
            flat = np.delete(flat, sorted(rows.other), axis=0)
        keys = np.ascontiguousarray(flat[:, :16]).view(KEY).ravel()
        del flat
        rest = cls.of(e["body_sha256"] for _, e in sorted(rows.other.items()))
        return cls(np.unique(np.concatenate([keys, rest.keys])), rest.odd)

    @classmethod
    def of_sequence(cls, seq: Sequence[dict[str, Any]]) -> KeySet:
        """The set of a plan phase's ``sequence`` entries' ``body_sha256`` (flat ``Entries`` or dicts).

        Raises:
            KeyError: an entry (a dict) has no ``body_sha256``.
        """
        digests = getattr(seq, "digests", None)
        if isinstance(digests, (bytes, bytearray)) and isinstance(getattr(seq, "other", None), dict):
            return cls.of_rows(seq, digests)  # type: ignore[arg-type]
        return cls.of(s["body_sha256"] for s in seq)

    def __len__(self) -> int:
        return len(self.keys) + len(self.odd)

    def issubset(self, other: KeySet) -> bool:
        """Every value of this set is in ``other``."""
        return self.odd <= other.odd and bool(member(self.keys, other.keys).all())

    def update(self, other: KeySet) -> None:
        """Add every value of ``other``."""
        self.keys = _merge(self.keys, other.keys[~member(other.keys, self.keys)])
        self.odd |= other.odd

    def add_first(self, keys: np.ndarray) -> np.ndarray:
        """Add a batch of ``keys`` (``KEY``, in send order); which of them are first sightings.

        Returns:
            A bool array as long as ``keys``: True at a key that was not in the
            set before and does not occur earlier in the batch.
        """
        mask = np.zeros(len(keys), dtype=bool)
        if not len(keys):
            return mask
        uk, first = np.unique(keys, return_index=True)  # first occurrences, keys sorted
        fresh = ~member(uk, self.keys)
        mask[first[fresh]] = True
        self.keys = _merge(self.keys, uk[fresh])
        return mask
