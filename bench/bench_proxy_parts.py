"""Where the capture proxy's CPU over the relay floor goes, arm by arm (issue 43 item 3).

Each arm is one ``kvreplay record`` in front of the same ``kvreplay serve-sim --time-scale
0.05 --slots 64``, measured as the guard's proxy group measures it (``bench_record``'s
``Proc``, ``floor_relay``, ``alternate_c64``): C64 runs of ``--requests`` mtbench bodies (104 tokens
an answer), the arms and ``bench/_relay_floor.py`` alternated (reversed every other rep), the
CPU of each relay's threads (schedstat, ns) per streamed token, and each arm's ratio to the
floor's run of the same rep. Arms:

- ``tree``: this tree as it is.
- ``NAME=SRC``: the kvreplay under another ``src/`` folder (an exported tree with its ``.so``
  files): a before/after comparison in the same minutes.
- ``noretain``: this tree with ``--paths /none`` (relayed, nothing retained, nothing accounted).
- ``no_body_file``, ``no_end_check``, ``no_secret_scan``: this tree with that one part replaced
  by a no-op (the capture's body file, the tally's per-read end check, the body's secret scan).
  Such an arm writes a wrong capture: it is for its CPU only.

``--capture-dir``: where the arms' capture folders are made. On this machine's ext4 (no journal)
a new file costs 15-700 µs of CPU depending on the files deleted in the minutes before
(docs/performance.md, "The proxy at C64"); on a tmpfs (``/dev/shm``) ~30 µs, which takes the
disk's state out of a comparison of code. The folders are left in place: deleting them would
slow the next run's files.

    PYTHONPATH=src .venv/bin/python bench/bench_proxy_parts.py --arms tree,noretain,no_body_file --reps 4
    PYTHONPATH=src .venv/bin/python bench/bench_proxy_parts.py --arms main=/tmp/ref/src,tree --capture-dir /dev/shm

Bounded: loopback only, ``--requests`` per run, ``--reps`` runs per arm.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PARTS = ("no_body_file", "no_end_check", "no_secret_scan")


def _child(part: str, argv: list[str]) -> None:
    """Run ``kvreplay record`` with ``part`` replaced by a no-op (this script as the arm's entry)."""
    import kvreplay.recorder._relay as relay
    import kvreplay.workload.capture as capture
    from kvreplay.cli import main

    if part == "no_body_file":
        capture._atomic_body_write = lambda path, data: None
    elif part == "no_end_check":
        relay.end_marker_in = lambda prev, chunk: False
    elif part == "no_secret_scan":
        capture.find_secrets = lambda raw, own=(), doc=None: []
    else:
        raise SystemExit(f"unknown part {part!r}: one of {', '.join(PARTS)}")
    sys.argv = ["kvreplay", *argv]
    main()


def _arms(spec: str) -> list[tuple[str, str | None, list[str], str | None]]:
    """``(name, src or None, extra record args, part or None)`` of each comma-separated arm."""
    out = []
    for a in filter(None, spec.split(",")):
        name, _, src = a.partition("=")
        if src:
            out.append((name, str(Path(src).resolve()), [], None))
        elif name == "tree":
            out.append((name, None, [], None))
        elif name == "noretain":
            out.append((name, None, ["--paths", "/none"], None))
        elif name in PARTS:
            out.append((name, None, [], name))
        else:
            raise SystemExit(f"unknown arm {name!r}: tree, noretain, NAME=SRC or one of {', '.join(PARTS)}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arms", default="tree,noretain", help="comma-separated arms (see above)")
    ap.add_argument("--requests", type=int, default=256, help="requests a C64 run (default %(default)s)")
    ap.add_argument("--reps", type=int, default=4, help="runs per arm (default %(default)s)")
    ap.add_argument("--capture-dir", type=Path, default=None, help="where capture folders are made (default: a "
                                                                   "new temporary folder, left in place)")
    a = ap.parse_args(argv)
    import uvloop
    from bench_record import Proc, alternate_c64, floor_relay

    where = Path(tempfile.mkdtemp(prefix="kvreplay-proxy-parts-", dir=a.capture_dir))
    arms = _arms(a.arms)
    load0 = os.getloadavg()
    sim = Proc("serve-sim", "--port", "0", "--time-scale", "0.05", "--slots", "64")
    procs: dict = {}
    base_pp = os.environ.get("PYTHONPATH", "")
    try:
        for name, src, extra, part in arms:
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [src, base_pp]))
            args = ["record", "--upstream", sim.url, "--out", str(where / f"W-{name}"), *extra]
            procs[name] = (Proc("--child", part, *args, script=Path(__file__)) if part
                           else Proc(*args))
        os.environ["PYTHONPATH"] = base_pp
        procs["floor"] = floor_relay(sim)
        t0 = time.perf_counter()
        cpu = uvloop.run(alternate_c64(sim, procs, a.requests, a.reps))
    finally:
        os.environ["PYTHONPATH"] = base_pp
        for p in reversed(list(procs.values())):
            p.stop()
        sim.stop()
    print(f"capture proxy arms, C64 runs of {a.requests} mtbench requests, {a.reps} alternating reps, captures in "
          f"{where}; {time.perf_counter() - t0:.0f} s; load average {load0[0]:.2f} before, {os.getloadavg()[0]:.2f} "
          "after")
    print("| arm | µs CPU a token (median) | over the relay floor (median) | reps |")
    print("|---|---:|---:|---|")
    for k, v in cpu.items():
        ratio = [x / f for x, f in zip(v, cpu["floor"], strict=True)]
        print(f"| {k} | {statistics.median(v):.2f} | {statistics.median(ratio):.3f}x | "
              f"{', '.join(f'{r:.3f}' for r in ratio)} |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(main())
