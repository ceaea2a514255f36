"""simulate's predictions equal the live counters of replays against the embedded simulator.

Each case replays a prime (forward) then a replay (reverse) of the first 20 mtbench-52 bodies at
C1 against ``--target sim`` configured like the simulation, at three capacities per model, and
compares summed per-request counter deltas (hits, hit tokens) and ``usage.cached_tokens`` with
``kvreplay simulate`` on the same workload and phases.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "fixtures" / "workloads" / "mtbench-52"
PHASES = ["--phase", "prime:forward:c1:first20", "--phase", "replay:reverse:c1:first20"]


def live(tmp_path, capsys, name, *sim_flags):
    out = tmp_path / name
    rc = main(
        [
            "run",
            str(WORKLOAD),
            *PHASES,
            "--target",
            "sim",
            "--sim-time-scale",
            "0",
            "--out",
            str(out),
            "--quiet",
            *sim_flags,
        ]
    )
    capsys.readouterr()
    assert rc == 0
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines() if x.strip()]
    assert len(recs) == 40 and all(r["status"] == "ok" for r in recs)
    hits = sum(r["counter_delta"]["hits"] for r in recs)
    cached = sum(r["usage"]["cached_tokens"] for r in recs)
    return int(hits), int(cached)


def predicted(capsys, caps, *flags):
    assert (
        main(
            [
                "simulate",
                str(WORKLOAD),
                *PHASES,
                "--capacities",
                ",".join(map(str, caps)),
                "--json",
                *flags,
            ]
        )
        == 0
    )
    rep = json.loads(capsys.readouterr().out)
    assert rep["requests"] == 40
    return rep, {r["capacity"]: (r["hit_requests"], r["hit_tokens"]) for r in rep["curve"]}


@pytest.mark.slow
def test_entries_model_matches_live_counters(tmp_path, capsys):
    caps = [2, 6, 24]
    rep, pred = predicted(capsys, caps, "--model", "entries")
    assert rep["method"] == "per-capacity"
    got = {
        c: live(tmp_path, capsys, f"e{c}", "--sim-cache", "entries", "--sim-cache-entries", str(c))
        for c in caps
    }
    assert got == pred
    assert len(set(pred.values())) == 3  # the three capacities really differ


@pytest.mark.slow
def test_radix_model_matches_live_counters(tmp_path, capsys):
    caps = [100, 250, 5000]
    rep, pred = predicted(capsys, caps, "--model", "radix", "--block-size", "16")
    assert rep["method"] == "one-pass"
    got = {
        c: live(
            tmp_path,
            capsys,
            f"r{c}",
            "--sim-cache",
            "radix",
            "--sim-block-size",
            "16",
            "--sim-device-blocks",
            str(c),
        )
        for c in caps
    }
    assert got == pred
    assert len(set(pred.values())) == 3


@pytest.mark.slow
def test_entries_one_pass_curve_matches_live_counters_with_refresh_on_offer(tmp_path, capsys):
    caps = [2, 6, 24]
    rep, pred = predicted(capsys, caps, "--model", "entries", "--recency", "offer")
    assert rep["method"] == "one-pass"
    got = {
        c: live(tmp_path, capsys, f"o{c}", "--sim-cache", "entries", "--sim-cache-entries", str(c),
                "--sim-entries-recency", "offer")
        for c in caps
    }
    assert got == pred
