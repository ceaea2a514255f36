"""The scrape parser process (``python -m kvreplay.backends._parse_worker``; see ``_offload``).

Reads requests from stdin and writes answers to stdout, each an 8-byte
little-endian length and a pickle: a request is ``(fn, text, args)``, an answer
``(True, fn(text, *args))`` or ``(False, message)`` for a ``BackendError``. It
exits at end of input. Only its parent writes to it (a pipe, never a socket).
"""

from __future__ import annotations

import pickle
import struct
import sys

_LEN = struct.Struct("<Q")


def main() -> int:
    """Serve requests until stdin closes; returns the exit status."""
    from kvreplay.errors import BackendError

    rd, wr = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = rd.read(_LEN.size)
        if len(head) < _LEN.size:
            return 0
        (n,) = _LEN.unpack(head)
        fn, text, args = pickle.loads(rd.read(n))  # noqa: S301 - from the parent process only
        try:
            answer: tuple[bool, object] = (True, fn(text, *args))
        except BackendError as exc:
            answer = (False, str(exc))
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        wr.write(_LEN.pack(len(data)) + data)
        wr.flush()


if __name__ == "__main__":
    raise SystemExit(main())
