"""``python _rss_main.py RSS_FILE ARGS...``: ``kvreplay ARGS...``, then its peak RSS (KiB) into RSS_FILE.

The peak is ``VmHWM`` from ``/proc/self/status`` (this address space's high-water
mark, proc(5)). ``ru_maxrss`` is not used where VmHWM exists: Linux carries the
parent's high-water mark across fork+exec into the child's ``ru_maxrss``, so a
large pytest process would show as this client's peak.
"""

import resource
import sys

from kvreplay.cli import main


def peak_rss_kib() -> int:
    """Peak resident set of this process in KiB (VmHWM; ru_maxrss where /proc is absent)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


if __name__ == "__main__":
    rss_file = sys.argv.pop(1)
    try:
        code = main(sys.argv[1:])
    finally:
        with open(rss_file, "w") as f:
            f.write(str(peak_rss_kib()))
    sys.exit(code)
