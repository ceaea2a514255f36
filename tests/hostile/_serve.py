"""``python _serve.py MODE``: a HostileServer in its own process; prints its URL, serves until stdin closes.

For timing tests: a server thread inside the measuring process would share its GIL.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from server import HostileServer  # noqa: E402

if __name__ == "__main__":
    with HostileServer(sys.argv[1]) as srv:
        print(srv.url, flush=True)
        sys.stdin.read()
