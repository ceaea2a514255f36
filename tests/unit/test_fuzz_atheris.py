"""Issue 9 fuzz with atheris (coverage-guided), where it is installed.

Each target runs in a subprocess (libFuzzer exits the process when done) for a
bounded number of inputs: the Prometheus reader, the halogen ``/cache`` reader,
the workload loader and the SSE accountant. A target fails when anything other
than its documented error escapes (``BackendError``, ``WorkloadError``,
``StreamError``); libFuzzer then prints the crashing input and exits non-zero.
Skipped when ``atheris`` cannot be imported (it is not a dependency:
``pip install atheris``). The hypothesis tests beside this file run everywhere.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris not installed"),
]

RUNS = int(os.environ.get("KVREPLAY_ATHERIS_RUNS", "3000"))

HARNESS = r"""
import os, sys, tempfile
import atheris

with atheris.instrument_imports():
    from kvreplay.accounting import SSEAccountant
    from kvreplay.backends import parse_dump
    from kvreplay.errors import BackendError, StreamError, WorkloadError
    from kvreplay.workload import load_workload

TARGET = sys.argv[1]
TMP = tempfile.mkdtemp()
PATH = os.path.join(TMP, "w.jsonl")


def one(data):
    fdp = atheris.FuzzedDataProvider(data)
    if TARGET in ("vllm", "sglang", "llamacpp", "halogen", "auto"):
        text = fdp.ConsumeUnicodeNoSurrogates(len(data))
        try:
            parse_dump(text, backend=TARGET)
        except BackendError:
            pass
    elif TARGET == "workload":
        with open(PATH, "wb") as f:
            f.write(data)
        try:
            load_workload(PATH, max_body_bytes=4096)
        except WorkloadError:
            pass
    elif TARGET == "sse":
        acc = SSEAccountant(head_chars=8, max_line_bytes=256)
        try:
            while fdp.remaining_bytes():
                acc.feed(fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 64)), 1)
            acc.close()
        except StreamError:
            pass


ARGS = ["-runs=" + sys.argv[2], "-max_total_time=15", "-timeout=10", "-max_len=512"]
atheris.Setup([sys.argv[0], *ARGS], one)
atheris.Fuzz()
"""


@pytest.mark.parametrize("target", ["vllm", "halogen", "auto", "workload", "sse"])
def test_atheris_target(target):
    proc = subprocess.run(
        [sys.executable, "-c", HARNESS, target, str(RUNS)],
        capture_output=True,
        text=True,
        timeout=55,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    tail = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0, tail
    assert "Done" in tail, tail  # libFuzzer's summary line: the runs completed
