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

from kvreplay.workload.jsonscan import iter_strings

__all__ = ["KEY_SHAPES", "MARKER", "SECRET_FIELDS", "Finding", "find_secrets", "redact_body"]

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


def _in_text(s: str, own: Sequence[str]) -> str | None:
    """The kind of the first secret inside ``s``, or None."""
    for sec in own:
        if sec in s:
            return "the request's own credential"
    for kind, pat in KEY_SHAPES:
        if pat.search(s):
            return kind
    return None


def find_secrets(body: bytes, own: Sequence[str] = ()) -> list[Finding]:
    """Every secret in a body (see module docstring for what counts).

    Args:
        body: The decoded request body (JSON; any bytes are accepted).
        own: The request's own credentials (``secrets_of`` of its headers).

    Returns:
        The findings, in document order (empty: no secret).
    """
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
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
        orjson.loads(body)
    except orjson.JSONDecodeError:
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
