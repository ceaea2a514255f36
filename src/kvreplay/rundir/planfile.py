"""``plan.json``: written before the first request, read back whole or compact.

The plan's content and its hash are ``kvreplay.plan``'s (``Plan.to_json``,
``plan_from_json``); this module writes and reads the file: ``write_plan_json``
(before the first request; a failure is exit 2 with nothing sent),
``load_plan_json`` (``kvreplay run --from-plan``, the ``--workers`` processes),
``read_plan`` (a run directory's plan as a dict, or None) and, for reports at
any scale, ``compact_plan`` / ``compact_plan_file``: the plan with each phase's
``sequence`` reduced to its first entry per distinct body, with the full length
in ``sequence_length``.
"""

from __future__ import annotations

import binascii
import itertools
import os
import re
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import orjson

from kvreplay.errors import ConfigError
from kvreplay.plan import Plan, SequenceView, json_chunks, plan_from_json, sequence_entry
from kvreplay.rundir.jsonfile import read_object
from kvreplay.rundir.names import PLAN
from kvreplay.safe_io import atomic_write_chunks, atomic_write_json, dumps_json
from kvreplay.workload import Workload

__all__ = [
    "HEAD_ENTRIES",
    "compact_plan",
    "compact_plan_file",
    "load_plan_json",
    "read_plan",
    "read_plan_bytes",
    "read_plan_file",
    "sequence_head",
    "sequence_length",
    "write_plan_json",
]

HEAD_ENTRIES = 200
"""Sequence entries a compact plan keeps per phase (the report's plan listing)."""


def write_plan_json(out: Path, plan_json: dict[str, Any]) -> None:
    """Write ``out/plan.json`` (before the first request; registered secrets redacted).

    Raises:
        ConfigError: it cannot be written (disk full, permission denied): field
            ``--out``, one line naming the run directory and the system's reason;
            nothing was sent (exit 2, as for an ``--out`` that is not writable).
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        if any(isinstance(ph, dict) and isinstance(ph.get("sequence"), SequenceView)
               for ph in plan_json.get("phases") or []):
            # Streamed entry by entry: the same bytes as atomic_write_json of the lists (issue 32).
            chunks = json_chunks(plan_json, b'"sequence": []', b",\n" + b" " * 8, b" " * 8, orjson.OPT_INDENT_2,
                                 dumps_json, close=b"\n" + b" " * 6)
            atomic_write_chunks(out / PLAN, itertools.chain(chunks, (b"\n",)))
        else:
            atomic_write_json(out / PLAN, plan_json)
    except OSError as exc:
        raise ConfigError(f"cannot write {PLAN}: {exc.strerror or exc}; nothing was sent",
                          path=out, field="--out") from None


def load_plan_json(path: str | Path, workload: Workload | None = None) -> tuple[Plan, dict[str, Any]]:
    """Re-read a plan.json so it can be executed again exactly.

    Args:
        path: The plan.json file.
        workload: The workload to check it against; loaded from the plan's
            ``workload.path`` by the caller when None is given here.

    Returns:
        The plan (sequence taken verbatim from the file) and its ``run`` block.

    Raises:
        ConfigError: unreadable file, not JSON, hash mismatch, or bodies whose
            SHA-256 no longer match the workload (``kvreplay.plan.plan_from_json``).
    """
    p = Path(path)
    return plan_from_json(read_plan_file(p), workload, path=p)


def read_plan_file(path: str | Path) -> Any:
    """The parsed content of a plan.json file (any JSON value; ``plan_from_json`` checks it).

    Raises:
        ConfigError: the file cannot be read or is not JSON ("cannot read plan: ...").
    """
    p = Path(path)
    try:
        return orjson.loads(p.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read plan: {exc}", path=p) from exc


def read_plan_bytes(run_dir: Path) -> bytes:
    """A run directory's plan.json as written (bytes).

    Raises:
        OSError: it cannot be read.
    """
    return (run_dir / PLAN).read_bytes()


def read_plan(run_dir: Path) -> dict[str, Any] | None:
    """A run directory's plan.json as a dict; None when it is missing, unreadable or not a JSON object."""
    return read_object(run_dir / PLAN)


_SEQ = re.compile(rb'"sequence"\s*:\s*\[')
_SHA = re.compile(rb'"body_sha256"\s*:\s*"([0-9A-Fa-f]*)"')
_POS = re.compile(rb'"position"\s*:\s*(-?\d+)')
_ENTRY = re.compile(rb"\{[^{}]*\}")


def compact_plan(data: bytes) -> dict[str, Any] | None:
    """plan.json parsed with each phase's ``sequence`` reduced to one entry per distinct body.

    A plan's sequence has one entry per planned request (200,000 entries are
    about 30 MB of dicts); the report needs only which bodies a phase sends (the
    replay rule of ``diagnose``), the first entries (the plan listing) and the
    count. Entries are flat objects (``position``, ``body_index``,
    ``body_sha256``, ``repetition``; ``kvreplay.plan``), so each ``sequence``
    array ends at the first ``]`` after it opens.

    Args:
        data: plan.json's bytes.

    Returns:
        The plan with ``sequence`` = the first entry of each distinct body in send
        order, ``sequence_length`` = the full entry count, ``sequence_head`` =
        the first ``HEAD_ENTRIES`` entries and ``sequence_positions: "range"``
        (positions are ``0 .. sequence_length - 1``, as ``kvreplay.plan`` writes
        them; a plan whose positions are not is returned whole); None when the
        bytes are not a JSON object.
    """
    try:
        return _compact_plan(data)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        return None


_Head = tuple[Any, list[dict[str, Any]], int, bool]  # (uniq, head, n, in_range)

_HEX = re.compile(rb"[0-9a-f]{64}")


class _Ints:
    """One integer column of ``Entries``: ``a + d * i`` while every value follows it, else an int64 array.

    A compact plan of a phase that sends every body once in order has positions
    ``0, 1, 2, ...``, body indices ``b, b + 1, ...`` (or descending), repetition 0 and
    no intended time (-1): four arithmetic columns that cost nothing per entry. The
    first value off the progression turns the column into the plain int64 array
    (``array('q')``) of all its values. Values are appended a batch at a time
    (numpy int64 arrays).
    """

    __slots__ = ("a", "arr", "d", "n")

    def __init__(self) -> None:
        self.n = 0
        self.a: int | None = None
        self.d: int | None = None
        self.arr: array | None = None

    def extend(self, vals: Any) -> None:
        """Append ``vals`` (a 1-d numpy int64 array)."""
        import numpy as np

        k = len(vals)
        if not k:
            return
        if self.arr is None:
            a = int(vals[0]) if self.a is None else self.a
            d = self.d
            if d is None and self.n + k > 1:
                d = int(vals[1]) - a if self.n == 0 else int(vals[0]) - a
            if d is None or (int(vals[0]) == a + d * self.n and bool((np.diff(vals) == d).all())):
                self.a, self.d, self.n = a, d, self.n + k
                return
            self.arr = array("q")
            if self.n:
                self.arr.frombytes((a + (d or 0) * np.arange(self.n, dtype=np.int64)).tobytes())
        self.arr.frombytes(np.ascontiguousarray(vals, dtype=np.int64).tobytes())
        self.n += k

    def __getitem__(self, i: int) -> int:
        if self.arr is not None:
            return self.arr[i]
        assert self.a is not None
        return self.a + (self.d or 0) * i


class Entries(Sequence[dict[str, Any]]):
    """A plan's sequence entries held as flat arrays, each dict rebuilt on access (issue 32).

    An entry of the usual shape (``position``, ``body_index``, ``repetition`` as
    integers in int64, ``body_sha256`` as 64 lowercase hex digits, optionally
    ``intended_ns``) costs its 32-byte digest plus at most 32 bytes of integers,
    none while a column follows an arithmetic progression (``_Ints``: the positions,
    body indices, repetitions and absent intended times of a phase that sends every
    body once); any other entry is kept as its dict. A compact plan of a million
    distinct bodies stays small.
    """

    _KEYS = ("position", "body_index", "body_sha256", "repetition")
    _BATCH = 4096
    _READ = 1 << 20  # bytes read at a time by ``_read_digests``

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        """Entries held in memory, or, with ``path``, whose digests stay in that file (``append``'s ``at``)."""
        # position, body_index, repetition, intended_ns (-1: none; -2: kept as its dict), byte offset in path
        self.cols = (_Ints(), _Ints(), _Ints(), _Ints(), _Ints())
        self._pend = array("q")  # the same five per entry, not yet in ``cols``
        self._digests = bytearray()
        self.path = path
        self.other: dict[int, dict[str, Any]] = {}
        self.n = 0

    def append(self, e: dict[str, Any], at: int = -1) -> None:
        """Add one entry (any dict); ``at``: where its JSON object starts in ``path`` (file-backed only)."""
        i, self.n = self.n, self.n + 1
        keys = tuple(e)
        ok = keys in (self._KEYS, (*self._KEYS, "intended_ns")) and all(
            type(e[k]) is int and 0 <= e[k] < 1 << 63 for k in keys if k != "body_sha256")
        sha = e.get("body_sha256")
        if ok and isinstance(sha, str) and _HEX.fullmatch(sha.encode()) and (self.path is None or at >= 0):
            self._pend.extend((e["position"], e["body_index"], e["repetition"], e.get("intended_ns", -1), at))
            if self.path is None:
                self._digests += bytes.fromhex(sha)
        else:
            self._pend.extend((0, 0, 0, -2, at))
            if self.path is None:
                self._digests += bytes(32)
            self.other[i] = e
        if len(self._pend) >= 5 * self._BATCH:
            self._settle()

    def _settle(self) -> None:
        import numpy as np

        m = np.frombuffer(self._pend, dtype=np.int64).reshape(-1, 5)
        for c, col in enumerate(self.cols):
            col.extend(m[:, c])
        del m
        self._pend = array("q")

    @property
    def digests(self) -> bytes | bytearray:
        """32 bytes of SHA-256 per entry (zeros for an entry kept as its dict).

        File-backed entries read them from ``path`` again at each access (``_read_digests``).
        """
        if self.path is None:
            return self._digests
        return b"".join(self._file_digests())

    def _file_digests(self) -> Iterator[bytes]:
        """Each entry's 32-byte digest, read from ``path`` in one forward pass (entries lie in file order)."""
        if self._pend:
            self._settle()
        yield from self._read_digests(range(self.n))

    def _read_digests(self, which: Iterable[int]) -> Iterator[bytes]:
        """The digests of entries ``which`` (ascending), read from ``path`` a megabyte at a time.

        Raises:
            ValueError: an entry is no longer where it was read (the file changed).
        """
        pos_col, ins_col, at_col = self.cols[0], self.cols[3], self.cols[4]
        with open(self.path, "rb") as f:  # type: ignore[arg-type]
            buf, base = b"", 0
            for i in which:
                if ins_col[i] == -2:
                    yield bytes(32)
                    continue
                at = at_col[i]
                while True:
                    end = buf.find(b"}", at - base) if base <= at < base + len(buf) else -1
                    if end >= 0:
                        break
                    if not base <= at < base + len(buf):
                        f.seek(at)
                        buf, base = f.read(self._READ), at
                        if not buf:
                            raise ValueError(f"{self.path}: plan entry {i} lies past the file's end (changed)")
                        continue
                    more = f.read(self._READ)
                    if not more:
                        raise ValueError(f"{self.path}: plan entry {i} has no end (the file changed)")
                    buf, base = buf[at - base:] + more, at
                m, pm = _SHA.search(buf, at - base, end), _POS.search(buf, at - base, end)
                if m is None or len(m.group(1)) != 64 or pm is None or int(pm.group(1)) != pos_col[i]:
                    raise ValueError(f"{self.path}: plan entry {i} is not the one read (the file changed)")
                yield binascii.a2b_hex(m.group(1))

    def __len__(self) -> int:
        return self.n

    def _get(self, i: int, sha: bytes | bytearray | None = None) -> dict[str, Any]:
        if self._pend:
            self._settle()
        pos, bi, rep, ins, _ = (c[i] for c in self.cols)
        if ins == -2:
            return self.other[i]
        if sha is None:
            sha = self._digests[32 * i:32 * i + 32] if self.path is None else next(self._read_digests((i,)))
        return sequence_entry(pos, bi, sha.hex(), rep, ins if ins >= 0 else None)

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self._get(j) for j in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError("sequence index out of range")
        return self._get(i % self.n)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self.path is None:
            return (self._get(i) for i in range(self.n))
        return (self._get(i, sha) for i, sha in enumerate(self._file_digests()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


class _FirstOfEach:
    """The first entry of each distinct body, in send order: a compact plan's ``sequence`` (issue 32).

    A body is its entry's ``body_sha256`` when that is 64 lowercase hex digits
    (its 16-byte key, ``evidence.KeySet``: 16 bytes a distinct body in a sorted
    array instead of a set of Python ints); otherwise the ``body_sha256`` text
    as written, or the whole entry's bytes when it has none (kept in a set, as
    before). Entries are decided in batches of ``BATCH`` in send order, so the
    result is that of a per-entry seen-set.
    """

    BATCH = 16384

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        from kvreplay.evidence.bodykeys import KeySet  # numpy, on first use

        self.uniq = Entries(path)
        self._ats = array("q")  # where each entry of the batch starts in ``path`` (-1: not known)
        self._seen = KeySet()
        self._raws: list[bytes] = []  # the batch's entries
        self._keys = bytearray()  # 16-byte keys of its hex-digest entries ...
        self._at = array("q")  # ... and their indices in the batch
        self._odd_new: list[int] = []  # batch indices of first sightings of other bodies

    def add(self, raw: bytes, at: int = -1) -> None:
        """One sequence entry (its JSON bytes, starting at byte ``at`` of the file), in send order."""
        sm = _SHA.search(raw)
        sha = sm.group(1) if sm else None
        i = len(self._raws)
        self._raws.append(raw)
        self._ats.append(at)
        if sha is not None and len(sha) == 64 and _HEX.fullmatch(sha):
            self._keys += binascii.a2b_hex(sha[:32])
            self._at.append(i)
        else:
            key = raw if sha is None else sha
            if key not in self._seen.odd:
                self._seen.odd.add(key)
                self._odd_new.append(i)
        if len(self._raws) >= self.BATCH:
            self._flush()

    def _flush(self) -> None:
        import numpy as np

        from kvreplay.evidence.bodykeys import KEY

        first = self._seen.add_first(np.frombuffer(bytes(self._keys), dtype=KEY))
        new = sorted([*self._odd_new, *np.asarray(self._at, dtype=np.int64)[first].tolist()])
        for i in new:
            self.uniq.append(orjson.loads(self._raws[i]), self._ats[i])
        self._raws, self._keys, self._at, self._odd_new, self._ats = [], bytearray(), array("q"), [], array("q")

    def done(self) -> Entries:
        """The first entries of each distinct body (``Entries``), in send order."""
        self._flush()
        return self.uniq


def _compact_plan(data: bytes) -> dict[str, Any] | None:
    heads: list[_Head] = []
    parts: list[bytes] = []
    pos = 0
    for m in _SEQ.finditer(data):
        end = data.find(b"]", m.end())
        if end < 0:
            return None
        span = data[m.end() : end]
        uniq = _FirstOfEach()
        head: list[dict[str, Any]] = []
        n = 0
        in_range = True
        for em in _ENTRY.finditer(span):
            raw = em.group(0)
            pm = _POS.search(raw)
            in_range = in_range and pm is not None and int(pm.group(1)) == n
            n += 1
            if len(head) < HEAD_ENTRIES:
                head.append(orjson.loads(raw))
            uniq.add(raw)
        heads.append((uniq.done(), head, n, in_range))
        parts.append(data[pos : m.end()])
        pos = end
    parts.append(data[pos:])
    return _assemble(parts, heads, lambda: data)


def compact_plan_file(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``compact_plan`` of a plan.json file, read line by line where it is indented.

    kvreplay writes plan.json indented (``orjson.OPT_INDENT_2``): each sequence
    entry spans a few short lines, so the file is read one line at a time and
    only the lines outside ``sequence`` arrays, the first ``HEAD_ENTRIES``
    entries and the first entry of each distinct body are kept. A file whose
    sequence does not open on a line of its own (compact JSON) is read whole.

    Returns:
        As ``compact_plan``; None when the file is missing or not a JSON object.

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return None
    with f:
        first = f.readline()
        if not first.rstrip().endswith(b"{"):
            return compact_plan(first + f.read())
        parts: list[bytes] = [first]
        heads: list[_Head] = []
        inside = False
        entry: list[bytes] = []
        uniq = _FirstOfEach()
        head: list[dict[str, Any]] = []
        off = entry_at = len(first)  # byte offsets: of the next line, of the entry being read
        for line in f:
            line_at, off = off, off + len(line)
            if not inside:
                parts.append(line)
                st = line.rstrip()
                if st.endswith(b"[") and _SEQ.search(st):
                    # the digests of this sequence's entries stay in the file (issue 32)
                    inside, uniq, head, n, in_range = True, _FirstOfEach(path), [], 0, True
                continue
            st = line.strip()
            if not entry and st.startswith(b"]"):
                heads.append((uniq.done(), head, n, in_range))
                parts.append(line)
                inside = False
                continue
            if not entry:
                entry_at = line_at
            entry.append(line)
            if st.startswith(b"}"):
                raw = b"".join(entry).rstrip().rstrip(b",")
                entry = []
                pm = _POS.search(raw)
                in_range = in_range and pm is not None and int(pm.group(1)) == n
                n += 1
                if len(head) < HEAD_ENTRIES:
                    head.append(orjson.loads(raw))
                uniq.add(raw, entry_at)
    if inside:
        return None
    return _assemble(parts, heads, lambda: Path(path).read_bytes())


def _assemble(parts: list[bytes], heads: list[_Head], whole: Callable[[], bytes]) -> dict[str, Any] | None:
    """The compact plan from the kept bytes ``parts`` and one ``(uniq, head, n, in_range)`` per sequence.

    Falls back to a full parse of ``whole()`` (the entire plan's bytes) when a
    "sequence" key stands elsewhere or positions are other than 0..n-1.

    Returns:
        The plan dict, or None when the kept bytes are not a JSON object.
    """
    try:
        plan = orjson.loads(b"".join(parts))
    except orjson.JSONDecodeError:
        return None
    if not isinstance(plan, dict):
        return None
    phases = [p for p in plan.get("phases") or [] if isinstance(p, dict) and "sequence" in p]
    if len(phases) != len(heads) or not all(h[3] for h in heads):
        # a "sequence" key elsewhere, or positions other than 0..n-1: the full parse
        full = orjson.loads(whole())
        return full if isinstance(full, dict) else None
    for ph, (uniq, head, n, _) in zip(phases, heads, strict=True):
        ph["sequence"] = uniq
        ph["sequence_head"] = head
        ph["sequence_length"] = n
        ph["sequence_positions"] = "range"
    return plan


def sequence_length(spec: dict[str, Any]) -> int:
    """Planned requests of a plan phase (compact or full plan)."""
    if "sequence_length" in spec:
        return int(spec["sequence_length"])
    return len(spec.get("sequence") or [])


def sequence_head(spec: dict[str, Any], n: int = 20) -> list[dict[str, Any]]:
    """The first ``n`` entries of a plan phase's sequence (compact or full plan)."""
    if "sequence_head" in spec:
        return list(spec["sequence_head"])[:n]
    return list(itertools.islice(spec.get("sequence") or [], n))
