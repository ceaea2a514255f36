r"""Secrets inside request bodies: the one detector used by ``record`` and every importer.

A body is parsed as JSON (``orjson``) and every string in it, member names
included, is checked *as decoded text*, so a JSON escape does not hide a
secret: ``"hunter2\u0068unter2"`` is the text ``hunter2hunter2``. A body that is
not JSON is checked as one UTF-8 text (bytes that are not UTF-8 replaced).

What counts as a secret (exactly; nothing else is looked for):

- the request's own credentials: each value :func:`kvreplay.workload.capture.secrets_of`
  takes from its headers (``Authorization`` and its token, cookies, any header
  whose name says key, token, secret, auth, session, password or credential),
  found anywhere inside a string;
- ``sk-ant-`` followed by 16 or more of ``A-Za-z0-9_-``, a digit among them
  (Anthropic-style keys);
- ``sk-``, ``pk-`` or ``rk-`` at a word start followed by 16 or more of those
  characters, a digit among them (OpenAI-style keys; ``sk-learn-model-selection``
  is prose, not a key);
- ``Bearer`` (any case), white space, then 16 or more token characters
  (``A-Za-z0-9._~+/=-``), a digit among them (``Bearer authentication`` is prose);
- ``AKIA`` or ``ASIA`` followed by 16 upper-case letters or digits (AWS access key ids);
- the string value (4 characters or more) of an object member whose name,
  lower-cased with ``_`` and ``-`` removed, is one of ``SECRET_FIELDS``
  (``api_key``, ``apikey``, ``token``, ``secret``, ``password``, ...).

A finding names the kind and where it is (``messages[0].content``), never the value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from kvreplay.workload.jsonscan import TooLargeToParse, iter_strings, loads_bounded

__all__ = ["ALLOWED_HEADERS", "KEY_SHAPES", "MARKER", "REDACTED", "SECRET_FIELDS", "Finding", "find_secrets", "redact",
           "redact_body", "retained_headers", "secrets_of"]

MARKER = "[REDACTED]"
"""What a secret inside a body is replaced with under ``--redact-body-secrets``."""

KEY_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("sk-ant- key", re.compile(r"sk-ant-(?=[A-Za-z0-9_\-]*[0-9])[A-Za-z0-9_\-]{16,}")),
    ("sk- key", re.compile(r"\b(?:sk|pk|rk)-(?=[A-Za-z0-9_\-]*[0-9])[A-Za-z0-9_\-]{16,}")),
    ("Bearer token", re.compile(r"\b[Bb][Ee][Aa][Rr][Ee][Rr]\s+(?=[A-Za-z0-9._~+/=\-]*[0-9])[A-Za-z0-9._~+/=\-]{16,}")),
    ("AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}")),
)
"""Well-known key shapes (name, pattern), searched in every string of a body."""

SECRET_FIELDS = frozenset({
    "apikey", "token", "secret", "password", "passwd", "accesstoken", "authtoken", "refreshtoken",
    "idtoken", "clientsecret", "secretkey", "secretaccesskey", "privatekey", "sessiontoken",
})
"""Member names (lower case, ``_``/``-`` removed) whose string value is taken as a secret."""

_MIN_FIELD = 4  # a shorter value ("", "none") is no secret


@dataclass(frozen=True, slots=True)
class Finding:
    """One secret found in a body: its ``kind`` and ``where`` (a JSON path), never its value."""

    kind: str
    where: str

    def __str__(self) -> str:
        return f"{self.kind} at {self.where}"


def _field_secret(name: str | None) -> bool:
    return name is not None and name.lower().replace("_", "").replace("-", "") in SECRET_FIELDS


def _hints(s: str) -> tuple[bool, ...]:
    r"""For each of ``KEY_SHAPES``, a substring test that holds whenever its pattern can match.

    A plain substring search costs about 1/30 of these patterns' own scan (three start with
    ``\b``, which the regex engine tries at every position): the pattern runs only where its
    hint holds, so the findings are the same (``tests/unit/workload/test_secrets_hints.py``).
    Measured: 1.7 ms -> 0.06 ms per 13 KB chat body, the record proxy's per-request work.
    """
    return ("sk-ant-" in s, "k-" in s, "bearer" in s.lower(), "AKIA" in s or "ASIA" in s)


_SHAPE_MIN = 19  # the shortest text a key shape matches: "sk-" and 16 more characters (characters)
_SEEN_MIN = 1024  # strings at least this long have their key-shape verdict remembered (chars)
_SEEN_CAP = 2 << 20  # chars of remembered strings, at most (2-8 MB); then forgotten all at once
_seen: dict[str, str | None] = {}
_seen_chars = 0


def _shape_in(s: str) -> str | None:
    """The kind of the first of ``KEY_SHAPES`` inside ``s``, or None."""
    if len(s) < _SHAPE_MIN:
        return None  # a member name, a role, a model: shorter than any key shape
    if "k-" not in s and "AKIA" not in s and "ASIA" not in s and "bearer" not in s.lower():
        return None  # no hint holds (``"sk-ant-"`` holds only with ``"k-"``): most strings, at a third of the cost
    for (kind, pat), hint in zip(KEY_SHAPES, _hints(s), strict=True):
        if hint and pat.search(s):
            return kind
    return None


def _in_text(s: str, own: Sequence[str]) -> str | None:
    """The kind of the first secret inside ``s``, or None.

    A long string's key-shape verdict is remembered (``_seen``, at most ``_SEEN_CAP``
    characters of strings): the bodies of one capture repeat their long strings (a
    system prompt, the turns of a conversation resent with every request), and hashing
    a string costs about a tenth of the hints' substring searches over it (a 12 KB
    system prompt: 2.5 against 33 µs measured). The request's own credentials are looked for
    every time (they differ from request to request).
    """
    global _seen_chars
    for sec in own:
        if sec in s:
            return "the request's own credential"
    if len(s) < _SEEN_MIN:
        return _shape_in(s)
    try:
        return _seen[s]
    except KeyError:
        pass
    kind = _shape_in(s)
    if _seen_chars + len(s) > _SEEN_CAP:
        _seen.clear()
        _seen_chars = 0
    _seen[s] = kind
    _seen_chars += len(s)
    return kind


def find_secrets(body: bytes, own: Sequence[str] = (), *, doc: object = None) -> list[Finding]:
    """Every secret in a body (see module docstring for what counts).

    Args:
        body: The decoded request body (JSON; any bytes are accepted).
        own: The request's own credentials (``secrets_of`` of its headers).
        doc: ``orjson.loads(body)`` when the caller parsed it already; None: parsed here.

    Returns:
        The findings, in document order (empty: no secret).
    """
    if doc is None:
        try:
            doc = loads_bounded(body)
        except (orjson.JSONDecodeError, TooLargeToParse):
            kind = _in_text(body.decode("utf-8", "replace"), own)
            return [Finding(kind, "body")] if kind else []
    out: list[Finding] = []
    stack: list[tuple[object, str, str | None]] = [(doc, "", None)]
    while stack:
        v, where, name = stack.pop()
        if isinstance(v, str):
            kind = _in_text(v, own)
            if kind is None and _field_secret(name) and len(v.strip()) >= _MIN_FIELD and v != MARKER:
                kind = f"a {name!r} field"
            if kind:
                out.append(Finding(kind, where or "body"))
        elif isinstance(v, dict):
            for k, x in reversed(list(v.items())):
                kind = _in_text(k, own)
                shown = "{name}" if kind else k  # a name that holds a secret is never shown
                if kind:
                    out.append(Finding(kind, f"{where}.{shown}" if where else shown))
                stack.append((x, f"{where}.{shown}" if where else shown, k))
        elif isinstance(v, list):
            for i in range(len(v) - 1, -1, -1):
                stack.append((v[i], f"{where}[{i}]", None))
    return out


def _redacted(s: str, own: Sequence[str]) -> str:
    for sec in own:
        s = s.replace(sec, MARKER)
    for _, pat in KEY_SHAPES:
        s = pat.sub(MARKER, s)
    return s


def redact_body(body: bytes, own: Sequence[str] = ()) -> bytes | None:
    """The body with each string holding a secret rewritten, every other byte kept.

    Only the affected JSON string tokens are re-encoded (``orjson``): a secret
    inside a string is replaced by ``[REDACTED]``; the whole value of a secret
    field becomes ``"[REDACTED]"``.

    Returns:
        The new bytes, or None when the body is not JSON or a secret would
        remain (it is then not retained).
    """
    try:
        loads_bounded(body)
    except (orjson.JSONDecodeError, TooLargeToParse):
        return None
    parts: list[bytes] = []
    pos = 0
    key: str | None = None
    try:
        for start, end, is_key in iter_strings(body):
            tok = body[start:end]
            s = orjson.loads(tok)
            new = _redacted(s, own)
            if not is_key and key is not None and _field_secret(key) and len(s.strip()) >= _MIN_FIELD \
                    and body[start - 1 : start].strip() in (b":", b""):
                new = MARKER
            if new != s:
                parts += (body[pos:start], orjson.dumps(new))
                pos = end
            key = s if is_key else None
    except ValueError:
        return None
    parts.append(body[pos:])
    out = b"".join(parts)
    return None if find_secrets(out, own) else out


# --- the request's own credentials (headers) and what a manifest keeps of them -------------

ALLOWED_HEADERS = frozenset({"content-type", "accept", "user-agent", "openai-beta", "x-request-id"})
"""Request headers kept in the manifest (lower case); no other header is ever written."""

REDACTED = MARKER
"""What a secret is replaced with in anything written."""

_SECRET_NAME = re.compile(r"auth|cookie|key|token|secret|session|passw|credential", re.IGNORECASE)
_KEYLIKE = re.compile(rb"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{16,}|\bBearer\s+[A-Za-z0-9._~+/=\-]{8,}")
_MIN_SECRET = 4  # shorter values would redact ordinary text (and are no secret)


def secrets_of(headers: object) -> list[str]:
    """The credential values of one request's headers, to be kept off the disk.

    Args:
        headers: A mapping or ``(name, value)`` pairs (aiohttp ``CIMultiDict`` works).

    Returns:
        Each credential header value, plus its token after a ``Bearer``/``Basic``
        scheme and each ``name=value`` value of a cookie; values shorter than 4
        characters are ignored. Longest first, so a value is redacted before a
        part of it.
    """
    items = headers.items() if hasattr(headers, "items") else headers
    out: set[str] = set()
    for name, value in items:  # type: ignore[union-attr]
        if not _SECRET_NAME.search(name) or not value:
            continue
        out.add(value.strip())
        parts = value.split(None, 1)
        if len(parts) == 2 and parts[0].lower() in ("bearer", "basic", "token"):
            out.add(parts[1].strip())
        if "cookie" in name.lower():
            for kv in value.split(";"):
                out.add(kv.split("=", 1)[-1].strip())
    return sorted((s for s in out if len(s) >= _MIN_SECRET), key=len, reverse=True)


def redact(data: bytes, secrets: list[str]) -> bytes:
    """``data`` with every secret (as is, and JSON-escaped) and every key-like token replaced.

    Key-like tokens are ``sk-``/``pk-``/``rk-`` followed by 16 or more key
    characters (OpenAI-style keys) and ``Bearer <token>``; they are replaced
    even when no header carried them.

    Args:
        data: Bytes about to be written (a manifest line, a plan).
        secrets: Values from :func:`secrets_of`.

    Returns:
        The bytes with each occurrence replaced by ``[REDACTED]``.
    """
    for s in secrets:
        raw = s.encode()
        esc = orjson.dumps(s)[1:-1]
        for form in {raw, esc}:
            data = data.replace(form, REDACTED.encode())
    return _KEYLIKE.sub(REDACTED.encode(), data)


def retained_headers(headers: object, secrets: list[str]) -> dict[str, str]:
    """The request headers kept in the manifest: ``ALLOWED_HEADERS`` only, names lower-cased.

    A value that contains a secret or a key-like token is dropped, not redacted.
    """
    items = headers.items() if hasattr(headers, "items") else headers
    out: dict[str, str] = {}
    for name, value in items:  # type: ignore[union-attr]
        n = name.lower()
        if n in ALLOWED_HEADERS and redact(value.encode(), secrets) == value.encode():
            out[n] = value
    return out
