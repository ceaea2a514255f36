r"""Secrets never written: the API key and URL credentials are replaced by a fixed marker.

A server may echo the request's ``Authorization`` header (in a 401 body, an SSE
error event, the content, ``usage``...), so every string kvreplay writes or
prints passes through here: record fields, summary.json, plan.json, reports,
stderr and the live display. The secrets are registered once per process
(``register``; the runner registers the credentials of its own headers, so a
worker process does too).

Redaction happens before truncation where kvreplay cuts a string itself; where
a string was already cut (a server text kept to 1 KiB, the first 256
characters of content), ``redact`` also removes a trailing *prefix* of a
secret of at least ``MIN_PREFIX`` characters, so no usable part of a key
survives a cut.

Also here: ``escape_controls``, which makes server text safe for a terminal or
Markdown (C0/C1 control characters and DEL shown as ``\\xNN``).

These are the rules; ``kvreplay.safe_io``, the output sink, applies them to every
file and terminal line kvreplay writes (JSON, JSON Lines, Markdown, HTML, ``echo``).
"""

from __future__ import annotations

import base64
import re
import sys
from typing import Any, TextIO
from urllib.parse import unquote

__all__ = ["MARKER", "MIN_PREFIX", "MIN_SECRET", "RedactingStream", "check_secret", "clear", "escape_controls",
           "has_secrets", "install_streams", "maybe_secret_labels", "redact", "redact_bytes", "redact_labels",
           "redact_obj", "redact_url", "register", "register_urls_in",
           "register_headers", "register_url", "secrets", "url_secrets"]

MARKER = "[REDACTED]"
"""What a secret is replaced with."""
MIN_PREFIX = 4
"""Shortest trailing prefix of a secret removed from a cut string (characters)."""
MIN_SECRET = 4
"""Shortest secret kvreplay accepts (characters). A shorter one cannot be redacted
safely (replacing every ``ab`` would rewrite ordinary text and JSON keys), nor left
in the outputs: ``register`` refuses it, and the commands turn that into exit 2
before anything is sent."""

_secrets: list[str] = []
_secret_bytes: list[bytes] = []


def has_secrets() -> bool:
    """True when a secret is registered (cheap: for a writer's per-record check)."""
    return bool(_secret_bytes)


def secrets() -> tuple[str, ...]:
    """The registered secrets (longest first)."""
    return tuple(_secrets)


def register(*values: str | None) -> None:
    """Add secrets to redact in this process (empty or None values are ignored).

    Raises:
        ValueError: a value of 1 to ``MIN_SECRET - 1`` characters (the message
            gives its length, never the value); nothing of the call is registered.
    """
    for v in values:
        if v and len(v) < MIN_SECRET:
            raise ValueError(f"a secret of {len(v)} character{'s' if len(v) > 1 else ''} is too short to keep "
                             f"out of kvreplay's outputs (at least {MIN_SECRET}); use a longer one")
    for v in values:
        if not v or v in _secrets:
            continue
        _secrets.append(v)
        # JSON writers may escape '/' or non-ASCII; the plain UTF-8 form is what orjson writes.
        _secret_bytes.append(v.encode("utf-8"))
    order = sorted(range(len(_secrets)), key=lambda i: -len(_secrets[i]))
    _secrets[:] = [_secrets[i] for i in order]
    _secret_bytes[:] = [_secret_bytes[i] for i in order]


def register_headers(headers: dict[str, str]) -> None:
    """Register the credentials found in request headers.

    ``Authorization: Bearer K`` registers ``K`` (and the whole value); ``Basic B``
    registers ``B`` and the ``user:password`` it decodes to, and the password.
    Any other header whose name says key, token or secret registers its value.

    Raises:
        ValueError: one of them is shorter than ``MIN_SECRET`` (``register``).
    """
    found: list[str] = []
    for name, value in headers.items():
        n = name.lower()
        if n in ("authorization", "proxy-authorization"):
            scheme, _, cred = value.partition(" ")
            found += (cred.strip(), value)
            if scheme.lower() == "basic":
                try:
                    dec = base64.b64decode(cred.strip(), validate=True).decode("utf-8")
                except ValueError:
                    continue
                found += (dec, dec.partition(":")[2])
        elif any(w in n for w in ("key", "token", "secret")):
            found.append(value)
    register(*found)  # all or nothing


def clear() -> None:
    """Forget every registered secret (tests)."""
    _secrets.clear()
    _secret_bytes.clear()


def _cut_tail(s: str, secret: str) -> str:
    """Remove a trailing prefix (>= MIN_PREFIX chars) of ``secret`` from ``s``."""
    n = len(secret)
    lo = max(0, len(s) - n + 1)
    head = secret[:MIN_PREFIX]
    i = s.find(head, lo)
    while i >= 0:
        if secret.startswith(s[i:]):
            return s[:i] + MARKER
        i = s.find(head, i + 1)
    return s


def redact(s: str) -> str:
    """``s`` with every registered secret, and a trailing prefix of one, replaced by ``MARKER``."""
    if not _secrets or not s:
        return s
    for sec in _secrets:
        if sec in s:
            s = s.replace(sec, MARKER)
        s = _cut_tail(s, sec)
    return s


def redact_bytes(b: bytes) -> bytes:
    """``b`` (UTF-8 text or JSON) with every registered secret replaced by ``MARKER``."""
    for sec in _secret_bytes:
        if sec in b:
            b = b.replace(sec, MARKER.encode())
    return b


def redact_obj(obj: Any) -> Any:
    """A copy of a JSON-like value with secrets redacted from every string (keys included)."""
    if not _secrets:
        return obj
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, dict):
        return {redact(k) if isinstance(k, str) else k: redact_obj(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact_obj(v) for v in obj]
    return obj


_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/@?#]*)@")
_SECRET_PARAM_WORDS = ("key", "token", "secret", "pass", "auth", "sig", "credential")
_QUERY_PAIR = re.compile(r"([?&;])([^=&;#]*)=([^&;#]*)")


def _secret_param(name: str) -> bool:
    n = unquote(name).lower()
    return any(w in n for w in _SECRET_PARAM_WORDS)


def redact_url(url: str) -> str:
    """``url`` with its userinfo (``user:password@``) replaced by ``MARKER@`` and secret query values by ``MARKER``.

    A query parameter is secret when its name says key, token, secret, pass, auth,
    sig or credential (``?api_key=K`` -> ``?api_key=[REDACTED]``). The result is the
    one form of a URL kvreplay writes or prints (a replica's name in records, plan.json,
    reports), whether or not the secrets were registered.
    """
    url = _USERINFO.sub(lambda m: f"{m.group(1)}{MARKER}@", url)
    if "?" not in url:
        return url
    head, q, rest = url.partition("?")
    return head + _QUERY_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}={MARKER}" if _secret_param(m.group(2))
                                  else m.group(0), q + rest)


_KEY_LIKE = re.compile(r"^(?:Bearer\s+\S{8,}|(?:sk|pk|rk|api|key)[-_][A-Za-z0-9_-]{16,})$", re.IGNORECASE)
_SECRET_LABEL_TEXT = re.compile(r"(?:key|token|secret|pass|auth|sig|credential)[A-Za-z0-9_]*\s*=\s*\"|"
                                r"=\s*\"(?:Bearer\s|(?:sk|pk|rk|api|key)[-_])", re.IGNORECASE)


def maybe_secret_labels(text: str) -> bool:
    """Whether an exposition text may hold a label ``redact_labels`` changes (a cheap linear search)."""
    return _SECRET_LABEL_TEXT.search(text) is not None


def redact_labels(labels: dict[str, str]) -> dict[str, str]:
    """Metric labels with the value of a secret one replaced by ``MARKER``.

    Secret: the label's name says key, token, secret, pass, auth, sig or credential
    (``redact_url``'s words), or its value looks like an API key (``sk-`` and 16 or
    more key characters, ``Bearer ...``). A server may expose its own key in an info
    series; it is not registered (kvreplay never had it), so this rule is what keeps it
    out of snapshot, counters.jsonl, identity and reports.
    """
    if not labels:
        return labels
    out = None
    for k, v in labels.items():
        if _secret_param(k) or _KEY_LIKE.match(v):
            out = out if out is not None else dict(labels)
            out[k] = MARKER
    return labels if out is None else out


def url_secrets(url: str) -> list[str]:
    """The secrets a URL carries, raw and percent-decoded; empty ones left out.

    Its userinfo (``user:password``, the password, or a lone user name) and every
    secret query value (the names ``redact_url`` treats as secret).
    """
    found: list[str] = []
    m = _USERINFO.match(url)
    if m:
        info = m.group(2)
        user, sep, password = info.partition(":")
        found += [info, unquote(info), password or user, unquote(password or user)]
    if "?" in url:
        q = "?" + url.partition("?")[2]
        for pm in _QUERY_PAIR.finditer(q):
            if _secret_param(pm.group(2)):
                found += [pm.group(3), unquote(pm.group(3))]
    return list(dict.fromkeys(v for v in found if v))


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")


def register_urls_in(text: str) -> None:
    """Register the secrets of every URL inside ``text`` (a command line, a whole experiment file).

    A user command (``curl -sf http://user:pw@host/health``, ``--target`` inside an arm's
    switch) is written to experiment.json, result.json and the command ledgers as given:
    its URLs' secrets (``url_secrets``) are redacted there like the options' own.

    Raises:
        ValueError: one of them is shorter than ``MIN_SECRET`` (``register``).
    """
    for m in _URL_IN_TEXT.finditer(text):
        register_url(m.group(0))


def register_url(url: str) -> None:
    """Register the secrets of ``url`` (``url_secrets``) so no output keeps them.

    Raises:
        ValueError: one of them is shorter than ``MIN_SECRET`` (``register``; the message never holds it).
    """
    register(*url_secrets(url))


_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape_controls(s: str, *, newlines: bool = False) -> str:
    r"""``s`` with control characters (C0 but tab/LF, DEL, C1) shown as ``\\xNN``; LF too when ``newlines``.

    Makes server text inert on a terminal (no escape sequences) and in Markdown.
    """
    if newlines:
        s = s.replace("\n", "\\x0a")
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


def check_secret(value: str, *, field: str) -> str:
    """Strip surrounding whitespace; refuse a control or non-ASCII character left inside.

    Raises:
        ValueError: a control character (C0, DEL) or a non-ASCII one inside the value
            (it goes into an ``Authorization`` header); the message names ``field`` and
            never the value.
    """
    v = value.strip()
    for i, c in enumerate(v):
        if ord(c) < 0x20 or ord(c) == 0x7F:
            raise ValueError(f"{field}: control character (code {ord(c)}) at offset {i} of the key; "
                             "it would end up in a request header")
        if ord(c) > 0x7E:  # a header value is ASCII here (RFC 9110 5.5 leaves other octets obsolete)
            raise ValueError(f"{field}: non-ASCII character (code {ord(c)}) at offset {i} of the key; "
                             "it cannot be sent in a request header")
    return v


class RedactingStream:
    """A text stream proxy that redacts secrets from everything written (stdout, stderr)."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, s: str) -> int:  # noqa: D102
        self._inner.write(redact(s) if _secrets else s)
        return len(s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def install_streams() -> tuple[TextIO, TextIO]:
    """Wrap ``sys.stdout`` and ``sys.stderr`` in ``RedactingStream``; returns the originals."""
    old = (sys.stdout, sys.stderr)
    if not isinstance(sys.stdout, RedactingStream):
        sys.stdout = RedactingStream(sys.stdout)
    if not isinstance(sys.stderr, RedactingStream):
        sys.stderr = RedactingStream(sys.stderr)
    return old
