"""The record proxy's periodic sidecar rewrites do not flush the disk on its event loop (issue 31 item 2).

``CaptureWriter.flush_sidecars`` rewrites ``W.arrivals.json`` and ``W.plan.toml`` atomically every
0.5 s while recording; only the last write (``close``) syncs them (4 ``fsync`` calls: each file and
its directory). A sync per rewrite held the proxy's loop for about 4 ms each on a busy disk.
"""

from __future__ import annotations

import json
import os

from kvreplay import safe_io
from kvreplay.workload.capture import CaptureWriter, sidecar_paths


def test_periodic_rewrites_are_atomic_and_unsynced_the_last_one_synced(tmp_path, monkeypatch):
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(safe_io.os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    w = CaptureWriter(tmp_path / "W", paths=("/v1/chat/completions",), origin_ns=0, observed_concurrency=True)
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    assert w.admit("POST", "/v1/chat/completions", body, 1_000_000) is not None
    w.flush_sidecars()
    arrivals, plan = sidecar_paths(tmp_path / "W")
    assert json.loads(arrivals.read_text()) == [0.0] and plan.read_text().startswith("# kvreplay record")
    assert calls == []
    assert w.admit("POST", "/v1/chat/completions", body, 3_500_000) is not None
    w.close()
    assert json.loads(arrivals.read_text()) == [0.0, 2.5]
    assert len(calls) == 4  # the last rewrite: each file, then its directory


def test_a_slow_rewrite_spaces_the_next_ones_and_close_always_writes(tmp_path):
    """A rewrite's cost grows with the capture (issue 32 item 2, ``record`` flat in N): at most 5% of
    the time goes to it. After a rewrite that took 0.1 s the next waits 0.1 / 0.05 = 2 s from when the
    last was asked for; ``close`` writes whatever the wait."""
    w = CaptureWriter(tmp_path / "W", paths=("/v1/chat/completions",), origin_ns=0, observed_concurrency=True)
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    arrivals, _ = sidecar_paths(tmp_path / "W")
    assert w.admit("POST", "/v1/chat/completions", body, 1_000_000) is not None
    w.flush_sidecars(now=100.0)
    assert json.loads(arrivals.read_text()) == [0.0]
    w._sidecar_s = 0.1  # as if that rewrite had taken 100 ms
    assert w.admit("POST", "/v1/chat/completions", body, 1_000_500) is not None  # 0.5 us later: 0.0005 ms
    w.flush_sidecars(now=101.999)
    assert json.loads(arrivals.read_text()) == [0.0]  # 1.999 s < 2 s: not yet
    w.flush_sidecars(now=102.0)
    assert json.loads(arrivals.read_text()) == [0.0, 0.001]  # round(0.0005, 3) as before: 0.0005 is 0.000500000...01
    w._sidecar_s = 1.0
    assert w.admit("POST", "/v1/chat/completions", body, 4_000_000) is not None
    w.flush_sidecars(now=103.0)
    assert json.loads(arrivals.read_text()) == [0.0, 0.001]
    w.close()
    assert json.loads(arrivals.read_text()) == [0.0, 0.001, 3.0]
