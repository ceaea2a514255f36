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
