"""Every number checked before the first request (issue 29 item 5): bad values exit 2.

One table: each row is a command line with one bad value (or two conflicting flags), the
flag(s) the error must name and, where the value reaches argparse's type check, the value.
Run as a subprocess, as a user would: exit status 2, the flag in stderr, no traceback.
Every case fails before a request is sent or a file is read (the probe's target is the
embedded simulator, never started).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WL = str(ROOT / "fixtures" / "workloads" / "mtbench-52")
FIT = ["fit", "--host-ram-gib", "64", "--weights-gib", "1", "--positions", "10"]

CASES = [
    # probe: sizes, byte counts, timeouts
    (["probe", "--target-prefix", "24GB"], ["--target-prefix"], "'24GB'"),
    (["probe", "--target-prefix=-24k"], ["--target-prefix"], "'-24k'"),
    (["probe", "--target-prefix", "-24k"], ["--target-prefix"], None),  # argparse: no value
    (["probe", "--target-prefix", "0"], ["--target-prefix"], "'0'"),
    (["probe", "--read-timeout", "-1"], ["--read-timeout"], "'-1'"),
    (["probe", "--sim-max-entry-bytes", "-1"], ["--sim-max-entry-bytes"], "'-1'"),
    (["probe", "--sim-bytes-per-token", "0"], ["--sim-bytes-per-token"], "'0'"),
    (["probe", "--flush-max", "-1"], ["--flush-max"], "'-1'"),
    (["probe", "--foreign-tokens", "8"], ["--foreign-tokens"], "'8'"),
    (["probe", "--flush-prefix", "8q"], ["--flush-prefix"], "'8q'"),
    (["probe", "--sizes", "16k,x"], ["--sizes"], "'16k,x'"),
    (["probe", "--flush-repeats", "0"], ["--flush-repeats"], "'0'"),
    # simulate: byte counts, rates, capacities, shares
    (["simulate", WL, "--max-entry-bytes", "-1"], ["--max-entry-bytes"], "'-1'"),
    (["simulate", WL, "--bytes-per-token", "-2674"], ["--bytes-per-token"], "'-2674'"),
    (["simulate", WL, "--bytes-per-token", "0"], ["--bytes-per-token"], "'0'"),
    (["simulate", WL, "--prefill", "a=-1.52,rate=1370"], ["--prefill"], "'a=-1.52,rate=1370'"),
    (["simulate", WL, "--prefill", "a=1.52,rate=0"], ["--prefill"], "'a=1.52,rate=0'"),
    (["simulate", WL, "--capacities", "8,-1"], ["--capacities"], "'-1'"),
    (["simulate", WL, "--capacities", "8,1.5"], ["capacities"], "1.5"),
    (["simulate", WL, "--share", "1.5"], ["--share"], "'1.5'"),
    (["simulate", WL, "--today", "0"], ["--today"], "'0'"),
    # fit: numbers, and conflicting flags are an error, not a silent choice
    ([*FIT, "--kv-bytes-per-position", "-5"], ["--kv-bytes-per-position"], "'-5'"),
    (["fit", "--host-ram-gib", "-64"], ["--host-ram-gib"], "'-64'"),
    ([*FIT, "--vision", "--vision-gib", "1.97"], ["--vision", "--vision-gib"], None),
    (
        [*FIT, "--kv-bytes-per-position", "28672", "--layers", "32", "--kv-heads", "8", "--head-dim", "128"],
        ["--kv-bytes-per-position", "--layers"],
        None,
    ),
    # units that make the verdict meaningless (issue 29 item 6): refused, naming the likely mistake
    (["fit", "--host-ram-gib", "124125", "--weights-gib", "1", "--positions", "10", "--kv-bytes-per-position", "1"],
     ["host-ram-gib", "MiB?"], "124125"),
    (["fit", "--memtotal-kb", "130154520576", "--weights-gib", "1", "--positions", "10",
      "--kv-bytes-per-position", "1"], ["memtotal-kb", "bytes?"], "130154520576"),
    (["fit", "--host-ram-gib", "64.5", "--weights-gib", "20", "--positions", "131072", "--kv-bytes-per-position",
      "131072", "--printed-need", "10@131072", "--max-tok", "0"], ["printed-need", "below its own KV"], None),
    (["simulate", WL, "--max-entry-bytes", "111", "--bytes-per-token", "2674"], ["max-entry-bytes", "MB?"], "111"),
    # issue 42 item 7: the same unit mistakes on fit's other figures and on probe's simulator
    ([*FIT, "--kv-bytes-per-position", "28"], ["kv-bytes-per-position", "KiB?"], "28672"),
    (["fit", "--host-ram-gib", "128", "--weights-gib", "60", "--positions", "524288", "--kv-bytes-per-position",
      "28672", "--reserve-gib", "24576"], ["reserve-gib", "MiB?"], "24 GiB"),
    (["fit", "--host-ram-gib", "64", "--weights-gib", "20", "--positions", "131072", "--kv-bytes-per-position",
      "131072", "--printed-need", "18432@131072", "--max-tok", "0"], ["printed-need", "MiB?"], "18 GiB"),
    (["probe", "--target", "sim", "--sim-max-entry-bytes", "111"], ["sim-max-entry-bytes", "MB?"], "111"),
]


@pytest.mark.parametrize(("argv", "flags", "value"), CASES, ids=[" ".join(c[0][:1] + c[0][-2:]) for c in CASES])
def test_bad_number_exits_2_naming_the_flag(argv, flags, value):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run(
        [sys.executable, "-m", "kvreplay", *argv], capture_output=True, text=True, timeout=60, env=env
    )
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    for flag in flags:
        assert flag in p.stderr, p.stderr
    if value is not None:
        assert value in p.stderr, p.stderr
    assert p.stdout == ""
