"""The body index: where each body lies on disk, so a replay holds indices, not bytes (issue 32).

A workload is indexed once: per body its byte offset and length in the ``.jsonl``
file (or its own file in a folder of ``*.json``), its SHA-256, its kind and its
``stream`` flag, in flat arrays (about 60 bytes a body, no Python object per
body). ``IndexedBodies`` is the sequence the rest of kvreplay indexes like a
tuple of ``Body``: ``bodies[i]`` reads body ``i``'s exact bytes from disk then
(``os.pread`` of its slice), checks them against the indexed SHA-256 and raises
``BodyChanged`` when they differ (the body was edited after indexing, hence after
planning: the plan's hashes are the index's).

The cache: ``<file>.kvindex`` beside a ``.jsonl`` file, ``<folder>.kvindex``
beside a folder; where that directory is not writable, under
``$XDG_CACHE_HOME/kvreplay/index/`` (default ``~/.cache``), named by the SHA-256
of the workload's absolute path. It is used only when its key still matches:
for a file its size, mtime (ns) and the SHA-256 of its first and last 64 KiB;
for a folder the SHA-256 over every ``*.json`` entry's name, size and mtime.
Anything else (missing, stale, unreadable, another format) indexes again.
Workloads under ``CACHE_MIN_BYTES`` are indexed in memory and never cached (they
index in milliseconds; no file appears beside small workloads).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import struct
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol, overload

import orjson

from kvreplay.errors import WorkloadError
from kvreplay.safe_io import atomic_write_chunks

__all__ = [
    "CACHE_MIN_BYTES",
    "INDEX_SUFFIX",
    "BodyChanged",
    "BodyIndex",
    "HexDigests",
    "IndexedBodies",
    "JoinedBodies",
    "build_index",
    "cache_paths",
    "hex_digests",
    "load_index",
]

INDEX_FORMAT = 1
"""Version of the cache file's layout; another version is ignored (indexed again)."""

INDEX_SUFFIX = ".kvindex"
"""Suffix of the cache file beside the workload."""

CACHE_MIN_BYTES = 8 << 20
"""Smallest workload (bytes of bodies) whose index is cached on disk."""

_MAGIC = b"KVREPLAY-INDEX\n"
_EDGE = 64 << 10
_CHUNK = 4 << 20
_CHAT, _STREAM = 1, 2


class BodyChanged(WorkloadError):
    """A body's bytes on disk no longer hash to the SHA-256 indexed (and planned) for it."""


@dataclass(frozen=True, slots=True)
class BodyIndex:
    """Where every body of a workload lies, and what it is.

    Attributes:
        path: The workload (a ``.jsonl`` file or a folder), as given.
        folder: True for a folder of ``*.json`` (one file per body).
        offsets: Byte offset of each body in the file ('q' array; 0 for a folder).
        lengths: Byte length of each body ('i' array when every length fits in int32, else 'q').
        lines: 1-based JSONL line of each body (a ``range`` when the bodies are on
            consecutive lines, else a 'q' array; 0 for a folder).
        digests: The bodies' SHA-256, 32 bytes each, in order.
        flags: One byte a body: bit 0 chat (else completions), bit 1 ``stream``.
        names: A folder's file names (``os.fsencode``) joined by NUL; empty for a file.
        name_ends: End offset of each name in ``names`` ('q' array; empty for a file).
        sha256: The workload's digest (``Workload.sha256``).
    """

    path: str
    folder: bool
    offsets: array
    lengths: array
    lines: Sequence[int]
    digests: bytes
    flags: bytes
    names: bytes
    name_ends: array
    sha256: str

    def __len__(self) -> int:
        return len(self.lengths)

    def sha_of(self, i: int) -> str:
        """Hex SHA-256 of body ``i``."""
        return self.digests[32 * i:32 * i + 32].hex()

    def name_of(self, i: int) -> str:
        """A folder body's file name."""
        start = self.name_ends[i - 1] + 1 if i else 0
        return os.fsdecode(self.names[start:self.name_ends[i]])

    def source_of(self, i: int) -> str:
        """``file.json`` or ``file.jsonl:LINE`` (``Body.source``)."""
        return self.name_of(i) if self.folder else f"{Path(self.path).name}:{self.lines[i]}"

    def file_of(self, i: int) -> Path:
        """The file holding body ``i``."""
        return Path(self.path) / self.name_of(i) if self.folder else Path(self.path)

    def total_bytes(self) -> int:
        """Bytes of all bodies."""
        return sum(self.lengths)


class CheckBody(Protocol):
    """``_loader.check_body``: validates one body, returns its ``Body`` (sha256, kind, stream)."""

    def __call__(self, raw: bytes, index: int, path: Path, line: int | None, max_bytes: int) -> Any: ...


class _Builder:
    """Accumulates a ``BodyIndex`` body by body (each checked with ``check``)."""

    def __init__(self, path: Path, folder: bool, check: CheckBody) -> None:
        self.path, self.folder, self.check = path, folder, check
        self.offsets, self.lengths, self.lines = array("q"), array("q"), array("q")
        # digests in a BytesIO: getvalue() hands over its buffer, no second copy of 32 bytes a body
        self.digests, self.flags, self.names = io.BytesIO(), bytearray(), bytearray()
        self.name_ends = array("q")
        self.h = hashlib.sha256()

    def add(self, raw: bytes, offset: int, line: int | None, file: Path, max_bytes: int) -> None:
        n = len(self.lengths)
        b = self.check(raw, n, file, line, max_bytes)
        self.h.update((b"\n" if n else b"") + b.sha256.encode())
        self.offsets.append(offset)
        self.lengths.append(len(raw))
        self.lines.append(line or 0)
        self.digests.write(bytes.fromhex(b.sha256))
        self.flags.append((_CHAT if b.kind == "chat" else 0) | (_STREAM if b.stream else 0))
        if self.folder:
            if self.names:
                self.names += b"\0"
            self.names += os.fsencode(file.name)
            self.name_ends.append(len(self.names))

    def done(self) -> BodyIndex:
        return BodyIndex(str(self.path), self.folder, self.offsets, _narrow_lengths(self.lengths),
                         _narrow_lines(self.lines), self.digests.getvalue(), bytes(self.flags), bytes(self.names),
                         self.name_ends, self.h.hexdigest())


_RUN = 1 << 16


def _narrow_lines(a: array) -> Sequence[int]:
    """``a`` (a 'q' array) as ``range(a[0], a[0] + len(a))`` when it is that progression (issue 32)."""
    if not len(a) or a[0] < 1:
        return a
    first = a[0]
    for s in range(0, len(a), _RUN):  # compared a run at a time: no second array of every value
        part = a[s:s + _RUN]
        if part != array("q", range(first + s, first + s + len(part))):
            return a
    return range(first, first + len(a))


def _narrow_lengths(a: array) -> array:
    """``a`` (a 'q' array of byte lengths) as an int32 array when every length fits (issue 32)."""
    return array("i", a) if not len(a) or max(a) < 1 << 31 else a


def _q_bytes(a: Sequence[int]) -> bytes:
    """The int64 bytes of ``a`` (the cache file's layout, whatever ``a`` holds in memory)."""
    return a.tobytes() if isinstance(a, array) and a.typecode == "q" else array("q", a).tobytes()


def _scan_jsonl(p: Path, bld: _Builder, max_bytes: int) -> None:
    """Index a JSONL file, read in chunks (never whole): one body per non-blank line."""
    with open(p, "rb") as f:
        buf = bytearray()
        base = lineno = 0
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            buf += chunk
            start = 0
            while (nl := buf.find(b"\n", start)) >= 0:
                lineno += 1
                _line(bytes(buf[start:nl]), base + start, lineno, p, bld, max_bytes)
                start = nl + 1
            if start:
                del buf[:start]
                base += start
            if len(buf) > max_bytes + _CHUNK:  # a line far over the limit: refuse it without reading on
                raise WorkloadError(f"body is over {len(buf)} bytes, over the limit of {max_bytes}", path=p,
                                    line=lineno + 1, body_index=len(bld.lengths))
        if buf:
            _line(bytes(buf), base, lineno + 1, p, bld, max_bytes)


def _line(line: bytes, offset: int, lineno: int, p: Path, bld: _Builder, max_bytes: int) -> None:
    line = line.rstrip(b"\r")
    if line.strip():
        bld.add(line, offset, lineno, p, max_bytes)


def build_index(path: Path, max_body_bytes: int, check: CheckBody) -> BodyIndex:
    """Index a workload from its bytes, checking every body with ``check`` (``_loader.check_body``).

    Raises:
        WorkloadError: a body over ``max_body_bytes``, not UTF-8, not JSON, or not a
            generation request (file, line and field named).
    """
    if path.is_dir():
        bld = _Builder(path, True, check)
        for f in sorted(f for f in path.iterdir() if f.suffix == ".json" and f.is_file()):
            if (size := f.stat().st_size) > max_body_bytes:  # checked before reading (issue 17)
                raise WorkloadError(f"body file is {size} bytes, over the limit of {max_body_bytes} "
                                    "(--max-body-bytes)", path=f)
            bld.add(f.read_bytes(), 0, None, f, max_body_bytes)
        return bld.done()
    bld = _Builder(path, False, check)
    _scan_jsonl(path, bld, max_body_bytes)
    return bld.done()


def cache_key(path: Path) -> dict[str, Any]:
    """What a cached index must match: size, mtime and edge hash of a file; the listing of a folder."""
    if path.is_dir():
        h = hashlib.sha256()
        for f in sorted(f for f in path.iterdir() if f.suffix == ".json"):
            st = f.stat()
            h.update(os.fsencode(f.name) + b"\0" + f"{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return {"kind": "folder", "listing": h.hexdigest()}
    st = path.stat()
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        h.update(fh.read(_EDGE))
        if st.st_size > _EDGE:
            fh.seek(max(_EDGE, st.st_size - _EDGE))
            h.update(fh.read(_EDGE))
    return {"kind": "file", "size": st.st_size, "mtime_ns": st.st_mtime_ns, "edge_sha256": h.hexdigest()}


def cache_paths(path: Path) -> tuple[Path, Path]:
    """Where the index of ``path`` is cached: beside it, and the per-user fallback."""
    full = path.resolve()
    beside = full.parent / (full.name + INDEX_SUFFIX)
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvreplay" / "index"
    return beside, root / (hashlib.sha256(os.fsencode(str(full))).hexdigest()[:40] + INDEX_SUFFIX)


def _encode(ix: BodyIndex, key: dict[str, Any]) -> Iterator[bytes]:
    """The cache file's bytes, a part at a time (each int64 copy made only as it is written; issue 32)."""
    head = orjson.dumps({"format": INDEX_FORMAT, "key": key, "path": str(Path(ix.path).resolve()),
                         "folder": ix.folder, "n": len(ix), "sha256": ix.sha256, "names": len(ix.names)})
    yield _MAGIC + struct.pack("<Q", len(head)) + head
    for col in (ix.offsets, ix.lengths, ix.lines):
        for s in range(0, len(col), _RUN):
            yield _q_bytes(col[s:s + _RUN])
    yield ix.digests
    yield ix.flags
    yield ix.name_ends.tobytes()
    yield ix.names


def _decode(f: BinaryIO, path: Path, key: dict[str, Any]) -> BodyIndex | None:
    """The index in the open cache file ``f``, read a part at a time (never the whole file at once)."""
    if f.read(len(_MAGIC)) != _MAGIC:
        return None
    (hlen,) = struct.unpack("<Q", f.read(8))
    head = orjson.loads(f.read(hlen))
    if (not isinstance(head, dict) or head.get("format") != INDEX_FORMAT or head.get("key") != key
            or head.get("path") != str(path.resolve())):
        return None
    n, folder, n_names = head["n"], head["folder"], head["names"]
    arrays = []
    for k in range(3):
        a = array("q")
        try:
            a.fromfile(f, n)
        except EOFError:
            return None
        arrays.append(_narrow_lengths(a) if k == 1 else _narrow_lines(a) if k == 2 else a)
        del a
    digests = f.read(32 * n)
    flags = f.read(n)
    ends = array("q")
    try:
        ends.fromfile(f, n * folder)
    except EOFError:
        return None
    names = f.read(n_names)
    if len(digests) != 32 * n or len(flags) != n or len(names) != n_names or f.read(1):
        return None
    return BodyIndex(str(path), bool(folder), arrays[0], arrays[1], arrays[2],  # type: ignore[arg-type]
                     digests, flags, names, ends, str(head["sha256"]))


def load_index(path: Path, max_body_bytes: int, check: CheckBody, *,
               cache_min_bytes: int = CACHE_MIN_BYTES) -> BodyIndex:
    """The index of ``path``: from its cache when still valid, else built (and cached when large).

    Args:
        path: A ``.jsonl`` file or a folder of ``*.json``.
        max_body_bytes: Largest body accepted; a cached index holding a larger body is
            indexed again so that the refusal names its file and line.
        check: Validates one body (``_loader.check_body``).
        cache_min_bytes: Smallest workload (bytes of bodies) whose index is written to disk.

    Raises:
        WorkloadError: a body is refused (``build_index``).
    """
    key = cache_key(path)
    for cp in cache_paths(path):
        try:
            with open(cp, "rb") as f:
                ix = _decode(f, path, key)
        except (OSError, ValueError, struct.error, KeyError, TypeError):
            ix = None
        if ix is not None and (not len(ix) or max(ix.lengths) <= max_body_bytes):
            return ix
    ix = build_index(path, max_body_bytes, check)
    if len(ix) and ix.total_bytes() >= cache_min_bytes:
        for cp in cache_paths(path):
            try:
                cp.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_chunks(cp, _encode(ix, key), fsync=False)
                break
            except OSError:
                continue
    return ix


class IndexedBodies(Sequence[Any]):
    """The bodies of an indexed workload, read from disk on access (a ``Sequence`` of ``Body``).

    ``bodies[i]`` reads body ``i`` (``os.pread`` of its slice of the ``.jsonl``
    file, or its own file) and checks its SHA-256; nothing is held between reads.
    ``body`` is the ``Body`` class (``_loader.Body``), built as
    ``body(index, raw, sha256, source, kind, stream)``.
    """

    def __init__(self, entries: BodyIndex, body: Any) -> None:
        self.entries, self.body = entries, body
        self._fd: int | None = None
        # the file's name, once: a source is named per request (``file.jsonl:LINE``)
        self._name = "" if entries.folder else Path(entries.path).name

    def __getstate__(self) -> dict[str, Any]:
        return {"entries": self.entries, "body": self.body}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["entries"], state["body"])  # type: ignore[misc]

    def __del__(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __len__(self) -> int:
        return len(self.entries)

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"body index {i} is outside the workload ({n} bodies)")
        i %= n
        ix = self.entries
        fl = ix.flags[i]
        return self.body(i, self.read(i), ix.digests[32 * i:32 * i + 32].hex(),
                         f"{self._name}:{ix.lines[i]}" if self._name else ix.name_of(i),
                         "chat" if fl & _CHAT else "completions", bool(fl & _STREAM))

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self[i]

    def sha_of(self, i: int) -> str:
        """Hex SHA-256 of body ``i`` (from the index; nothing read)."""
        return self.entries.sha_of(i)

    def size_of(self, i: int) -> int:
        """Bytes of body ``i`` (from the index; nothing read)."""
        return self.entries.lengths[i]

    def readahead(self, i: int | Sequence[int]) -> None:
        """Ask the kernel to start reading body ``i``, or bodies ``i`` (``posix_fadvise`` WILLNEED).

        Several bodies close together in the file (their span at most twice their bytes, as
        in a forward or reverse pass) get one call over the span, others one each. A hint,
        never an error; nothing for a folder.
        """
        ix = self.entries
        if ix.folder or not hasattr(os, "posix_fadvise"):
            return
        many = [i] if isinstance(i, int) else i
        if not many:
            return
        offs, lens = ix.offsets, ix.lengths
        lo = min(offs[j] for j in many)
        hi = max(offs[j] + lens[j] for j in many)
        spans = ([(lo, hi - lo)] if hi - lo <= 2 * sum(lens[j] for j in many)
                 else [(offs[j], lens[j]) for j in many])
        with contextlib.suppress(OSError):
            fd = self._file()
            for off, length in spans:
                os.posix_fadvise(fd, off, length, os.POSIX_FADV_WILLNEED)

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.entries.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return self._fd

    def read(self, i: int) -> bytes:
        """Body ``i``'s exact bytes, checked against its indexed SHA-256.

        Raises:
            BodyChanged: the bytes on disk differ from those indexed (edited, truncated, removed).
        """
        ix = self.entries
        want = ix.lengths[i]
        try:
            raw = ix.file_of(i).read_bytes() if ix.folder else os.pread(self._file(), want, ix.offsets[i])
        except OSError as exc:
            raise BodyChanged(f"body {i} cannot be read any more ({exc.strerror or exc}); "
                              "it changed on disk since the workload was indexed and planned",
                              path=ix.file_of(i), line=ix.lines[i] or None, body_index=i) from None
        if len(raw) != want or hashlib.sha256(raw).digest() != ix.digests[32 * i:32 * i + 32]:
            raise BodyChanged(f"body {i} changed on disk since the workload was indexed and planned "
                              f"(sha256 {hashlib.sha256(raw).hexdigest()[:12]}, planned {ix.sha_of(i)[:12]}); "
                              "not sent", path=ix.file_of(i), line=ix.lines[i] or None, body_index=i)
        return raw


class JoinedBodies(Sequence[Any]):
    """Several body sequences one after another, each body re-indexed to its place (``Plan.bind``)."""

    def __init__(self, parts: Sequence[Sequence[Any]]) -> None:
        self.parts = tuple(parts)
        self.starts = []
        n = 0
        for p in self.parts:
            self.starts.append(n)
            n += len(p)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def _where(self, i: int) -> tuple[Sequence[Any], int]:
        if not -self.n <= i < self.n:
            raise IndexError(f"body index {i} is outside the workload ({self.n} bodies)")
        i %= self.n
        for start, p in zip(reversed(self.starts), reversed(self.parts), strict=True):
            if i >= start:
                return p, i - start
        raise AssertionError("unreachable")

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list[Any]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        p, j = self._where(i)
        b = p[j]
        return type(b)(i % self.n, b.raw, b.sha256, b.source, b.kind, b.stream)

    def __iter__(self) -> Iterator[Any]:
        for i in range(self.n):
            yield self[i]

    def sha_of(self, i: int) -> str:
        """Hex SHA-256 of body ``i``."""
        p, j = self._where(i)
        return _sha_of(p, j)

    def size_of(self, i: int) -> int:
        """Bytes of body ``i``."""
        p, j = self._where(i)
        return _size_of(p, j)

    def readahead(self, i: int | Sequence[int]) -> None:
        """``IndexedBodies.readahead`` where the part is indexed (several: grouped by part)."""
        parts: dict[int, tuple[Sequence[Any], list[int]]] = {}
        for k in [i] if isinstance(i, int) else i:
            p, j = self._where(k)
            if isinstance(p, (IndexedBodies, JoinedBodies)):
                parts.setdefault(id(p), (p, []))[1].append(j)
        for p, js in parts.values():
            p.readahead(js)  # type: ignore[attr-defined]


class HexDigests(Sequence[str]):
    """Bodies' SHA-256 as hex strings, over 32 bytes a body (a plan's ``body_sha256`` at any scale).

    Reads like a tuple of strings (indexing, iteration, ``==`` with a tuple or list);
    pickled as a tuple.
    """

    def __init__(self, digests: bytes) -> None:
        self.digests = digests

    def __len__(self) -> int:
        return len(self.digests) // 32

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> Any:
        n = len(self)
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(n))]
        if not -n <= i < n:
            raise IndexError("digest index out of range")
        i %= n
        return self.digests[32 * i:32 * i + 32].hex()

    def __iter__(self) -> Iterator[str]:
        return (self.digests[k:k + 32].hex() for k in range(0, len(self.digests), 32))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, HexDigests):
            return self.digests == other.digests
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))


def hex_digests(bodies: Sequence[Any]) -> Sequence[str]:
    """Every body's hex SHA-256, in order: a ``HexDigests`` over the index where indexed, else a tuple."""
    if isinstance(bodies, IndexedBodies):
        return HexDigests(bodies.entries.digests)
    return tuple(_sha_of(bodies, i) for i in range(len(bodies)))


def _sha_of(bodies: Sequence[Any], i: int) -> str:
    if isinstance(bodies, (IndexedBodies, JoinedBodies)):
        return bodies.sha_of(i)
    return str(bodies[i].sha256)


def _size_of(bodies: Sequence[Any], i: int) -> int:
    if isinstance(bodies, (IndexedBodies, JoinedBodies)):
        return bodies.size_of(i)
    return int(bodies[i].body_bytes)


def sha_of(bodies: Sequence[Any], i: int) -> str:
    """Hex SHA-256 of body ``i`` of any body sequence, reading nothing where it is indexed."""
    return _sha_of(bodies, i)


def size_of(bodies: Sequence[Any], i: int) -> int:
    """Bytes of body ``i`` of any body sequence, reading nothing where it is indexed."""
    return _size_of(bodies, i)
