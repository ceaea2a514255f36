"""Start-up cost: ``kvreplay --help`` and ``kvreplay run --target sim`` to its first request (issue 35).

    .venv/bin/python bench/bench_startup.py            # medians of 10, then the import profile

``--help``: the wall time of the whole process (fork/exec to exit), median of 10.
First request: wall time from just before the process is started to the moment the
first phase starts sending (``ClientMonitor.start`` wrapped in the child), read on the
system-wide monotonic clock (``time.monotonic``, CLOCK_MONOTONIC on Linux, one clock
for parent and child). Targets: ``--help`` <= 0.08 s, first request <= 0.5 s. The load
average is printed beside the figures: on a busy machine both rise.
The import profile is ``python -X importtime`` of ``--help``, the ten largest
cumulative entries.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "fixtures" / "workloads" / "mtbench-52"
N = 10

CHILD = r"""
import sys, time
from kvreplay.metrics import selfmeasure
orig = selfmeasure.ClientMonitor.start
def start(self, *a, **k):
    if not getattr(selfmeasure, "_bench_seen", False):
        selfmeasure._bench_seen = True
        sys.stderr.write(f"FIRST_REQUEST {time.monotonic()!r}\n")
    return orig(self, *a, **k)
selfmeasure.ClientMonitor.start = start
from kvreplay.cli import main
sys.exit(main(sys.argv[1:]))
"""


def help_s() -> float:
    """Seconds of one ``kvreplay --help`` process."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "kvreplay", "--help"], check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def first_request_s(out: Path) -> float:
    """Seconds from process start to the first phase sending, for a run against the embedded simulator."""
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", CHILD, "run", str(WORKLOAD), "--target", "sim", "--phase",
                        "a:forward:c1:first1", "--out", str(out), "--quiet", "--sim-time-scale", "0"],
                       check=True, capture_output=True, text=True, timeout=120)
    line = next(x for x in r.stderr.splitlines() if x.startswith("FIRST_REQUEST "))
    return float(line.split()[1]) - t0


def main() -> None:
    """Print the two medians (s) with min/max, the load average and the import profile of ``--help``."""
    helps = [help_s() for _ in range(N)]
    with tempfile.TemporaryDirectory() as d:
        firsts = [first_request_s(Path(d) / f"r{i}") for i in range(N)]
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for name, xs, target in (("kvreplay --help", helps, 0.08), ("run --target sim to first request", firsts, 0.5)):
        print(f"{name:36s} median {statistics.median(xs):.3f} s  (min {min(xs):.3f}, max {max(xs):.3f};"
              f" target <= {target} s)")
    prof = subprocess.run([sys.executable, "-X", "importtime", "-m", "kvreplay", "--help"],
                          capture_output=True, text=True, check=True).stderr.splitlines()
    rows = []
    for line in prof:
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    print("import profile of --help (cumulative us, largest 10):")
    for us, name in sorted(rows, reverse=True)[:10]:
        print(f"  {us:8d}  {name}")


if __name__ == "__main__":
    main()
