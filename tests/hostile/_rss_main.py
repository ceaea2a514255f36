"""``python _rss_main.py RSS_FILE ARGS...``: ``kvreplay ARGS...``, then its peak RSS (KiB) into RSS_FILE."""

import resource
import sys

from kvreplay.cli import main

if __name__ == "__main__":
    rss_file = sys.argv.pop(1)
    try:
        code = main(sys.argv[1:])
    finally:
        with open(rss_file, "w") as f:
            f.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
    sys.exit(code)
