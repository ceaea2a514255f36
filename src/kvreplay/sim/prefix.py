"""Content keys of token-sequence prefixes, shared by every cache model.

A prefix of ``L`` tokens is identified by the BLAKE2b digest (16 bytes) of its
token ids written as little-endian signed 64-bit integers. Two prefixes have the
same key exactly when they hold the same tokens (up to a 2**-128 collision), so
the key stands for the KV state a server would have after processing them; the
length is implied by the content. Block hashes of the radix model are the keys
at multiples of the block size (vLLM chains its block hashes in the same spirit:
each block's hash covers its parent's).

Keys at many lengths of one sequence cost one pass over its bytes: the hasher is
fed in increasing order of length and copied at each requested length.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Iterable, Sequence

__all__ = ["BlockHasher", "PrefixKeys"]

_DIGEST_BYTES = 16


class PrefixKeys:
    """Keys of the prefixes of one token sequence.

    Args:
        tokens: Token ids (any ints in the signed 64-bit range).

    Raises:
        OverflowError: A token id does not fit in 64 bits.
    """

    __slots__ = ("_view", "n")

    def __init__(self, tokens: Sequence[int]) -> None:
        arr = array("q", tokens)
        if sys.byteorder != "little":
            arr.byteswap()
        self._view = memoryview(arr.tobytes())
        self.n = len(arr)
        """Number of tokens in the sequence."""

    def keys_at(self, lengths: Iterable[int]) -> dict[int, bytes]:
        """Keys of the prefixes of the given lengths.

        Args:
            lengths: Prefix lengths (tokens); each in ``0..n``. Duplicates are fine.

        Returns:
            length -> 16-byte key, for every requested length.

        Raises:
            ValueError: A length is negative or longer than the sequence.
        """
        out: dict[int, bytes] = {}
        h = hashlib.blake2b(digest_size=_DIGEST_BYTES)
        done = 0
        for length in sorted(set(lengths)):
            if length < 0 or length > self.n:
                raise ValueError(f"prefix length {length} outside 0..{self.n}")
            h.update(self._view[done * 8 : length * 8])
            done = length
            out[length] = h.copy().digest()
        return out

    def key(self, length: int) -> bytes:
        """Key of one prefix (see ``keys_at``)."""
        return self.keys_at((length,))[length]

    def block_keys(self, block_size: int, limit: int | None = None) -> list[bytes]:
        """Keys at every full block boundary: ``key(B), key(2B), ...``.

        Args:
            block_size: Tokens per block (> 0).
            limit: Consider only the first ``limit`` tokens (default: all).

        Returns:
            One key per full block of the (limited) sequence.
        """
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        n = self.n if limit is None else min(limit, self.n)
        h = hashlib.blake2b(digest_size=_DIGEST_BYTES)
        out = []
        step = block_size * 8
        for end in range(step, n * 8 + 1, step):
            h.update(self._view[end - step : end])
            out.append(h.copy().digest())
        return out


class BlockHasher:
    """Block keys of a growing token sequence, fed in pieces.

    ``keys[i]`` equals ``PrefixKeys(seq).key((i + 1) * block_size)``: the radix
    model keys a request's prompt blocks at admission and continues over its
    output at the finish without hashing the prompt again.

    Args:
        block_size: Tokens per block (> 0).
    """

    __slots__ = ("_h", "_pending", "block_size", "keys")

    def __init__(self, block_size: int) -> None:
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self.block_size = block_size
        self.keys: list[bytes] = []
        """Keys of the full blocks fed so far."""
        self._h = hashlib.blake2b(digest_size=_DIGEST_BYTES)
        self._pending = b""

    def feed(self, tokens: Sequence[int]) -> list[bytes]:
        """Append tokens; returns ``keys`` (all full blocks so far)."""
        arr = array("q", tokens)
        if sys.byteorder != "little":
            arr.byteswap()
        data = memoryview(self._pending + arr.tobytes())
        step = self.block_size * 8
        full = len(data) // step * step
        for end in range(step, full + 1, step):
            self._h.update(data[end - step : end])
            self.keys.append(self._h.copy().digest())
        self._pending = bytes(data[full:])
        return self.keys
