"""Importers of traffic people already have: HAR 1.2 archives and OpenAI Batch input files.

Both write a capture folder (``kvreplay.workload.capture``): ``W/NNNNNN.json``
bodies, ``W/capture.jsonl`` and ``W.plan.toml`` beside ``W`` (plus
``W.arrivals.json`` for HAR, whose entries carry start times). Bodies keep
the bytes of the source, never re-serialised except where said:

- **HAR 1.2** (``log.entries[]``; W3C Web Performance WG draft "HTTP Archive
  (HAR) format", HAR 1.2 spec by Jan Odvarko): an entry is retained when its
  ``request.method`` is POST and the path of ``request.url`` is one of
  ``paths``. The body is ``request.postData.text`` encoded as UTF-8 (the JSON
  string holds the text exactly; ``postData.encoding = "base64"``, which
  some exporters write, is decoded). Arrivals are the entries'
  ``startedDateTime`` (ISO 8601), bodies ordered by them (stable: equal times
  keep file order). ``response.status`` and the response's usage (SSE or
  JSON ``response.content.text``) and ``time`` (E2E, ms) go into the manifest.
- **OpenAI Batch input** (JSONL, one request per line: ``custom_id``,
  ``method``, ``url``, ``body``; OpenAI API reference, "Batch: the input
  file"): the body is the exact byte span of the ``body`` value in the line,
  found by a scan of the line's top-level object. When the span cannot be
  taken (its bytes do not parse to the same value), the body is
  re-serialised with orjson instead and the manifest line and the summary
  say so (``reserialised: true``). There are no times: the plan is a closed
  loop.

Entries that are not generation requests (another path, another method, no
``postData``) are counted by reason and skipped. A malformed file raises
``WorkloadError`` naming the file, the line (Batch) or the entry's field
(HAR: ``log.entries[i].request.url``), and nothing is written for it beyond
what was already there.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import orjson

from kvreplay.errors import WorkloadError
from kvreplay.workload._loader import DEFAULT_MAX_BODY_BYTES, check_body, json_line
from kvreplay.workload.capture import DEFAULT_PATHS, CaptureSummary, CaptureWriter, sidecar_paths
from kvreplay.workload.jsonscan import TooLargeToParse, loads_bounded, value_end, ws

__all__ = ["ImportedCapture", "body_value_span", "import_har", "import_openai_batch"]


@dataclass(slots=True)
class ImportedCapture:
    """What an importer wrote.

    Attributes:
        folder: The capture folder ``W``.
        arrivals: ``W.arrivals.json``, or None (Batch input: no times).
        plan: ``W.plan.toml``.
        summary: Bodies retained and entries skipped by reason.
        reserialised: Sources (``file:line`` and ``custom_id``) whose body had
            to be re-serialised (Batch only).
    """

    folder: Path
    arrivals: Path | None
    plan: Path
    summary: CaptureSummary
    reserialised: list[str] = field(default_factory=list)


def _need_some(keep: list, summary: CaptureSummary, p: Path, paths: tuple[str, ...]) -> None:
    if not keep:
        raise WorkloadError(f"no generation request (POST to {', '.join(paths)}) to import; "
                            f"{summary.describe()}", path=p)


# --- HAR 1.2 ---------------------------------------------------------------------------


_KIND: dict[type, str] = {dict: "an object", str: "a string", list: "a list"}
_T = TypeVar("_T")


def _har_field(obj: object, key: str, kind: type[_T], where: str, p: Path) -> _T:
    """``obj[key]`` when it is a ``kind``; else WorkloadError naming ``where.key``."""
    v = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(v, kind):
        raise WorkloadError(f"missing or not {_KIND[kind]}", path=p, field=f"{where}.{key}" if where else key)
    return v


def _pairs(items: object) -> list[tuple[str, str]]:
    out = []
    if isinstance(items, list):
        for h in items:
            if isinstance(h, dict) and isinstance(h.get("name"), str) and isinstance(h.get("value"), str):
                out.append((h["name"], h["value"]))
    return out


def _response_usage(resp: object) -> tuple[int | None, object, str | None]:
    """``(status, usage, error)`` of a HAR response (SSE or JSON ``content.text``)."""
    from kvreplay.accounting import SSEAccountant
    from kvreplay.errors import StreamError

    if not isinstance(resp, dict):
        return None, None, None
    status = resp.get("status") if isinstance(resp.get("status"), int) else None
    content = resp.get("content")
    if not isinstance(content, dict):
        return status, None, None
    text = content.get("text")
    if not isinstance(text, str) or not text:
        return status, None, None
    data = text.encode("utf-8", "surrogatepass")
    if content.get("encoding") == "base64":
        try:
            data = base64.b64decode(text, validate=True)
        except ValueError:
            return status, None, None
    if "event-stream" in str(content.get("mimeType", "")) or data.lstrip().startswith(b"data:"):
        acct = SSEAccountant(head_chars=0)
        with contextlib.suppress(StreamError):
            acct.feed(data, 0)
        r = acct.close()
        return status, r.usage, r.error
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return status, None, None
    if not isinstance(obj, dict):
        return status, None, None
    err = obj.get("error")
    msg = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else None
    return status, obj.get("usage"), msg if isinstance(msg, str) else None


def _parse_started(text: str, p: Path, where: str) -> int:
    try:
        dt = datetime.fromisoformat(text)
    except ValueError as exc:
        raise WorkloadError(f"not an ISO 8601 date-time: {text!r}", path=p,
                            field=f"{where}.startedDateTime") from exc
    if dt.tzinfo is None:
        raise WorkloadError(f"has no time zone: {text!r}", path=p, field=f"{where}.startedDateTime")
    return round(dt.timestamp() * 1e6) * 1000


def _post_bytes(post: dict, p: Path, where: str) -> bytes:
    """A HAR entry's request body: ``postData.text`` as UTF-8, or decoded from base64.

    Raises:
        WorkloadError: ``text`` missing, not base64 when it says so, or holding a lone surrogate.
    """
    text = _har_field(post, "text", str, f"{where}.request.postData", p)
    if post.get("encoding") == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except ValueError as exc:
            raise WorkloadError(f"postData.encoding is base64 but the text is not: {exc}", path=p,
                                field=f"{where}.request.postData.text") from exc
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise WorkloadError("text holds a lone surrogate; not UTF-8", path=p,
                            field=f"{where}.request.postData.text") from exc


def import_har(
    src: str | Path,
    out: str | Path,
    *,
    paths: tuple[str, ...] = DEFAULT_PATHS,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    redact_body_secrets: bool = False,
) -> ImportedCapture:
    """Write a capture folder from a HAR 1.2 archive (see module docstring).

    Args:
        src: The ``.har`` file (JSON).
        out: The capture folder ``W`` to create (must not exist, or be empty).
        paths: URL paths whose POST bodies are retained.
        max_body_bytes: Largest body accepted (bytes).
        redact_body_secrets: Retain a body holding a secret with the secret replaced
            (``workload.secrets``) instead of skipping it (``secret``).

    Returns:
        What was written.

    Raises:
        WorkloadError: unreadable or non-JSON file, no ``log.entries`` list, an
            entry without ``request``/``method``/``url``/``startedDateTime``,
            a retained entry whose ``postData.text`` is not a string or whose
            body is not a chat/completions JSON object (field named).
        ConfigError: ``out`` exists and is not empty.
    """
    p = Path(src)
    try:
        # one JSON document: parsed whole (its bytes dropped at once); bodies are encoded one at a time
        doc = loads_bounded(p.read_bytes())
    except OSError as exc:
        raise WorkloadError(f"cannot read: {exc}", path=p) from exc
    except TooLargeToParse as exc:
        raise WorkloadError(f"too large to parse: {exc}", path=p) from None
    except orjson.JSONDecodeError as exc:
        raise WorkloadError(f"not JSON (a HAR file is one JSON document): {exc}", path=p) from exc
    log = _har_field(doc, "log", dict, "", p) if isinstance(doc, dict) else None
    if log is None:
        raise WorkloadError("not a JSON object", path=p, field="log")
    entries = _har_field(log, "entries", list, "log", p)
    keep: list[tuple[int, int, list, dict]] = []
    summary = CaptureSummary()
    for i, e in enumerate(entries):
        where = f"log.entries[{i}]"
        if not isinstance(e, dict):
            raise WorkloadError("not an object", path=p, field=where)
        req = _har_field(e, "request", dict, where, p)
        method = _har_field(req, "method", str, f"{where}.request", p)
        url = _har_field(req, "url", str, f"{where}.request", p)
        started = _parse_started(_har_field(e, "startedDateTime", str, where, p), p, where)
        if method.upper() != "POST":
            summary.skip("method")
            continue
        if urlsplit(url).path not in paths:
            summary.skip("path")
            continue
        post = req.get("postData")
        if post is None:
            summary.skip("no postData")
            continue
        raw = _post_bytes(post, p, where)
        try:
            check_body(raw, len(keep), p, None, max_body_bytes)
        except WorkloadError as exc:
            raise WorkloadError(exc.message, path=p, field=f"{where}.request.postData.text"
                                + (f" (body field {exc.field})" if exc.field else "")) from exc
        del raw  # encoded again when written: one body in memory at a time, beside the parsed document
        headers = _pairs(req.get("headers")) + [("cookie", v) for _, v in _pairs(req.get("cookies"))]
        keep.append((started, i, headers, e))
    keep.sort(key=lambda k: (k[0], k[1]))
    _need_some(keep, summary, p, paths)
    writer = CaptureWriter(out, max_body_bytes=max_body_bytes, paths=paths,
                           origin_ns=keep[0][0] if keep else 0, redact_body_secrets=redact_body_secrets)
    writer.summary.skipped = summary.skipped
    for started, i, headers, e in keep:
        raw = _post_bytes(e["request"]["postData"], p, f"log.entries[{i}]")
        path = urlsplit(e["request"]["url"]).path
        slot = writer.admit("POST", path, raw, started, headers)
        if slot is None:  # only "secret" can reach here: the body was checked above
            continue
        status, usage, error = _response_usage(e.get("response"))
        t = e.get("time")
        e2e = round(t * 1e6) if isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 else None
        writer.complete(slot, status=status, outcome="complete" if status else "unknown", usage=usage,
                        e2e_ns=e2e, error=error, extra={"source": f"{p.name}:log.entries[{i}]"})
    s = writer.close(comment=f"kvreplay import har {p.name}")
    arrivals, plan = sidecar_paths(out)
    return ImportedCapture(Path(out), arrivals if s.retained else None, plan, s)


# --- OpenAI Batch input ----------------------------------------------------------------


def body_value_span(line: bytes, key: str = "body") -> tuple[int, int] | None:
    """Byte span ``(start, end)`` of the value of top-level ``key`` in a JSON object line.

    The line must already be known to be valid JSON (the scan trusts its
    structure). With a duplicated key the last one wins, as in orjson. Linear
    time, constant extra memory (``workload.jsonscan``).

    Returns:
        The span, or None when the line is not an object or has no such key.
    """
    try:
        i = ws(line, 0)
        if line[i : i + 1] != b"{":
            return None
        i = ws(line, i + 1)
        found = None
        while line[i : i + 1] != b"}":
            k_end = value_end(line, i)
            k = orjson.loads(line[i:k_end])
            i = ws(line, k_end)
            if line[i : i + 1] != b":":
                return None
            i = ws(line, i + 1)
            v_end = value_end(line, i)
            if k == key:
                found = (i, v_end)
            i = ws(line, v_end)
            if line[i : i + 1] == b",":
                i = ws(line, i + 1)
        return found
    except (ValueError, IndexError, orjson.JSONDecodeError):
        return None


def _lines(p: Path) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines of a JSONL file, read one at a time: ``(1-based number, line without EOL)``.

    Raises:
        WorkloadError: the file cannot be read.
    """
    try:
        with open(p, "rb") as f:
            for lineno, line in enumerate(f, start=1):
                line = line.rstrip(b"\n").rstrip(b"\r")
                if line.strip():
                    yield lineno, line
    except OSError as exc:
        raise WorkloadError(f"cannot read: {exc}", path=p) from exc


def _batch_body(p: Path, lineno: int, line: bytes, paths: tuple[str, ...], summary: CaptureSummary,
                max_body_bytes: int, index: int) -> tuple[bytes, str, bool, str] | None:
    """``(body bytes, custom_id, re-serialised?, path)`` of a retained Batch line; None when skipped (counted).

    Raises:
        WorkloadError: a bad line (line and field named).
    """
    obj = json_line(line, p, lineno)
    if not isinstance(obj, dict):
        raise WorkloadError("not a JSON object", path=p, line=lineno)
    for key, kind in (("custom_id", str), ("method", str), ("url", str), ("body", dict)):
        if not isinstance(obj.get(key), kind):
            what = "an object" if kind is dict else "a string"
            raise WorkloadError(f"missing or not {what}", path=p, line=lineno, field=key)
    if obj["method"].upper() != "POST":
        summary.skip("method")
        return None
    path = urlsplit(obj["url"]).path
    if path not in paths:
        summary.skip("path")
        return None
    span = body_value_span(line)
    raw = line[span[0] : span[1]] if span else b""
    reser = False
    body, cid = obj["body"], obj["custom_id"]
    del obj
    try:
        same = bool(span) and loads_bounded(raw) == body
    except orjson.JSONDecodeError:
        same = False
    except TooLargeToParse as exc:
        raise WorkloadError(f"line too large to parse: {exc}", path=p, line=lineno, field="body") from None
    if not same:
        raw, reser = orjson.dumps(body), True
    try:
        check_body(raw, index, p, lineno, max_body_bytes, doc=body)
    except WorkloadError as exc:
        raise WorkloadError(exc.message, path=p, line=lineno,
                            field="body" + (f".{exc.field}" if exc.field else "")) from exc
    return raw, cid, reser, path


def import_openai_batch(
    src: str | Path,
    out: str | Path,
    *,
    paths: tuple[str, ...] = DEFAULT_PATHS,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    redact_body_secrets: bool = False,
) -> ImportedCapture:
    """Write a capture folder from an OpenAI Batch input JSONL file (see module docstring).

    Args:
        src: The ``.jsonl`` file (one request object per line; blank lines skipped).
        out: The capture folder ``W`` to create (must not exist, or be empty).
        paths: URL paths (``url`` values) whose bodies are retained.
        max_body_bytes: Largest body accepted (bytes).
        redact_body_secrets: Retain a body holding a secret with the secret replaced
            (``workload.secrets``) instead of skipping it (``secret``).

    Returns:
        What was written; ``reserialised`` names the bodies whose exact bytes
        could not be taken from the line.

    Raises:
        WorkloadError: unreadable file; a line that is not a JSON object, lacks
            ``custom_id``/``method``/``url``/``body`` or has the wrong type, or
            (for a retained path) whose body is not a chat/completions request
            (line and field named).
        ConfigError: ``out`` exists and is not empty.
    """
    p = Path(src)
    # Two streaming passes, one line in memory at a time: the first checks every line (nothing is
    # written for a bad file), the second writes the bodies. Memory: a few times the longest line.
    keep: list[int] = []
    summary = CaptureSummary()
    for lineno, line in _lines(p):
        if _batch_body(p, lineno, line, paths, summary, max_body_bytes, len(keep)) is not None:
            keep.append(lineno)
    _need_some(keep, summary, p, paths)
    writer = CaptureWriter(out, max_body_bytes=max_body_bytes, paths=paths, timed=False,
                           redact_body_secrets=redact_body_secrets)
    writer.summary.skipped = summary.skipped
    reserialised = []
    wanted = set(keep)
    for lineno, line in _lines(p):
        if lineno not in wanted:
            continue
        got = _batch_body(p, lineno, line, paths, CaptureSummary(), max_body_bytes, 0)
        if got is None:
            raise WorkloadError("changed while it was read", path=p, line=lineno)
        raw, cid, reser, path = got
        del line
        slot = writer.admit("POST", path, raw, 0)
        if slot is None:
            continue
        if reser:
            reserialised.append(f"{p.name}:{lineno} (custom_id {cid})")
        writer.complete(slot, status=None, outcome="imported",
                        extra={"source": f"{p.name}:{lineno}", "custom_id": cid, "reserialised": reser})
    s = writer.close(comment=f"kvreplay import openai-batch {p.name}")
    _, plan = sidecar_paths(out)
    return ImportedCapture(Path(out), None, plan, s, reserialised)
