"""Decode a request body's ``Content-Encoding`` for retention, streaming, under a hard size cap.

The recording proxy forwards the bytes it received, encoded as they came; what it
retains for the workload is the *decoded* body (what the server parses). A
compressed body can inflate a thousandfold (a 1 MB gzip of zeros is 1 GB), so
decoding is streaming (``zlib.decompressobj``) and each call's output is bounded
with ``max_length``: the decoder never holds more than ``cap`` decoded bytes plus
one step of at most ``STEP`` bytes, and stops decoding (drops what it holds) the
moment the body passes ``cap``.

Encodings (RFC 9110 section 8.4.1): ``identity`` (or none), ``gzip`` (also
``x-gzip``; RFC 1952, several members allowed) and ``deflate`` (the zlib format
of RFC 1950, and the raw deflate some clients send instead). Any other coding,
or a list of codings (``gzip, br``), is not decoded: ``SUPPORTED`` says which are.
"""

from __future__ import annotations

import zlib

__all__ = ["STEP", "SUPPORTED", "BodyDecoder", "DecodeRefused", "normalise"]

SUPPORTED = frozenset({"identity", "gzip", "x-gzip", "deflate"})
"""``Content-Encoding`` values (lower case, trimmed) whose bodies are decoded and retained."""

STEP = 1 << 20
"""Most decoded bytes produced by one decompression call (bytes)."""


class DecodeRefused(Exception):  # noqa: N818 - a verdict, not an error of the program
    """The body is not retained: ``reason`` is ``"too_large"`` or ``"encoding"``; ``detail`` says why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def normalise(content_encoding: str | None) -> str:
    """``Content-Encoding`` as one lower-case coding (``identity`` when absent or empty)."""
    v = (content_encoding or "").strip().lower()
    return v or "identity"


class BodyDecoder:
    """Feeds a body's received bytes in, keeps its decoded bytes, refuses past ``cap``.

    Args:
        content_encoding: The request's ``Content-Encoding`` header (None: identity).
        cap: Most decoded bytes kept (bytes); one more and ``feed`` raises.

    Raises:
        DecodeRefused: (``reason = "encoding"``) a coding outside ``SUPPORTED``.
    """

    def __init__(self, content_encoding: str | None, cap: int) -> None:
        self.encoding = normalise(content_encoding)
        if self.encoding not in SUPPORTED:
            raise DecodeRefused("encoding", f"Content-Encoding {self.encoding!r} is not decoded "
                                            f"(only {', '.join(sorted(SUPPORTED))})")
        self.cap = cap
        self.received = 0
        self.out = bytearray()
        self._z: zlib._Decompress | None = None
        self._raw_fallback = False
        if self.encoding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif self.encoding == "deflate":
            self._z = zlib.decompressobj(zlib.MAX_WBITS)

    def _over(self) -> DecodeRefused:
        self.out = bytearray()  # release what was held
        return DecodeRefused("too_large", f"decoded body passes {self.cap} bytes (Content-Encoding "
                                          f"{self.encoding}); not retained")

    def feed(self, chunk: bytes) -> None:
        """Add received bytes.

        Raises:
            DecodeRefused: the decoded body passes ``cap`` (``too_large``) or the
                bytes are not valid for the coding (``encoding``); the decoder is
                then spent (its buffer released).
        """
        self.received += len(chunk)
        if self._z is None:
            if len(self.out) + len(chunk) > self.cap:
                raise self._over()
            self.out += chunk
            return
        data = chunk
        while data:
            room = self.cap - len(self.out) + 1
            try:
                piece = self._z.decompress(data, min(room, STEP))
            except zlib.error as exc:
                if self.encoding == "deflate" and not self._raw_fallback and not self.out \
                        and self.received == len(chunk):
                    # raw deflate (no zlib header), as some clients send for "deflate"
                    self._raw_fallback = True
                    self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                    continue
                self.out = bytearray()
                raise DecodeRefused("encoding", f"body is not valid {self.encoding} data ({exc})") from None
            self.out += piece
            if len(self.out) > self.cap:
                raise self._over()
            data = self._z.unconsumed_tail
            if self._z.eof and self._z.unused_data:
                if self.encoding == "deflate":
                    self.out = bytearray()
                    raise DecodeRefused("encoding", "bytes after the end of the deflate stream")
                # another gzip member (RFC 1952 2.2: a file may hold several)
                data = self._z.unused_data
                self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def finish(self) -> bytes:
        """The decoded body, once every received byte was fed.

        Raises:
            DecodeRefused: (``encoding``) a compressed body cut short.
        """
        if self._z is not None:
            tail = self._z.flush(STEP)
            self.out += tail
            if len(self.out) > self.cap:
                raise self._over()
            if not self._z.eof and self.received:
                self.out = bytearray()
                raise DecodeRefused("encoding", f"{self.encoding} body ends before its stream does")
        return bytes(self.out)
