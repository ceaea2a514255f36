"""Runs against the simulator's entries cache with an entry cap: the report's counter
table shows refused stores and bytes per entry, and a calibrated run keeps its calibration.

Workload (three bodies, ``helpers.write_chat_workload``), token counts by the
simulator's tokenizer (``kvreplay.sim.tokenizer``: one token per piece, markers
one each):

- system message ``<|im_start|>system\\n`` (3) + content ``System block i:`` then
  ``alpha beta gamma delta`` x 30 and a trailing space (``System``, `` block``,
  `` i``, ``:``, 120 words, `` ``: 125) + ``<|im_end|>\\n`` (2) = **130** = system_end;
- user ``<|im_start|>user\\n`` (3) + ``qi?`` (``q``, ``i``, ``?``: 3) + 2 = 8 ->
  messages_end **138**;
- generation prompt ``<|im_start|>assistant\\n`` (1 + ``assist`` ``ant`` + 1 = 4)
  -> prompt **142**.

The entries model stores two snapshots per request (system_end 130 and
messages_end 138) at ``bytes_per_token`` 100 bytes each token. The bodies differ
from token 6 on (`` i``), so no snapshot of one serves another.
"""

from __future__ import annotations

import hashlib
import html
import json
import signal
import subprocess
import sys
from pathlib import Path

from helpers import write_chat_workload

from kvreplay.cli import main

PHASES = ["--phase", "prime:forward:c1", "--phase", "again:forward:c1"]
COUNTER_COLS = [
    "Δ lookups (lookups)", "Δ hits (lookups)", "Δ misses (lookups)", "Δ hit_tokens (tokens)",
    "Δ stores (entries)", "Δ evictions (entries)", "Δ refused (entries)", "Δ entries (entries)",
    "Δ bytes (bytes)", "bytes per entry (bytes)",
]


def workload(folder: Path) -> Path:
    return write_chat_workload(
        folder, [(f"System block {i}: " + "alpha beta gamma delta " * 30, f"q{i}?") for i in range(3)]
    )


def md_table(md: str, title: str) -> tuple[list[str], list[list[str]]]:
    """Header cells and rows of the first table under ``## title``."""
    lines = md.split(f"## {title}\n", 1)[1].splitlines()
    end = next((i for i, ln in enumerate(lines) if ln.startswith("## ")), len(lines))
    rows = [ln for ln in lines[:end] if ln.startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in rows]
    return cells[0], cells[2:]


def counter_rows(out: Path) -> tuple[list[str], dict[str, list[str]]]:
    head, rows = md_table((out / "report.md").read_text(), "Native counter deltas per phase")
    return head[1:], {r[0]: r[1:] for r in rows}


def run(tmp_path: Path, *extra: str, target: str = "sim") -> Path:
    wl = workload(tmp_path / "wl")
    out = tmp_path / "run"
    argv = ["run", str(wl), "--target", target, "--out", str(out), "--quiet", *PHASES]
    if target == "sim":
        argv += ["--sim-time-scale", "0.005", "--sim-cache", "entries", "--sim-bytes-per-token", "100"]
    assert main(argv + list(extra)) == 0
    return out


def test_truncated_entries_hold_the_cap(tmp_path):
    # cap 10000 bytes / 100 = 100 tokens: both snapshots (130, 138) truncate to the
    # first 100 tokens and collapse into one entry per body: 3 stores, 0 refused,
    # 3 x 100 x 100 = 30000 bytes, 10000 per entry. The second pass hits each one:
    # min(100, 142 - 1) = 100 cached tokens x 3 = 300; the snapshots it offers are held.
    out = run(tmp_path, "--sim-max-entry-bytes", "10000")
    head, rows = counter_rows(out)
    assert head == COUNTER_COLS
    assert rows["prime (C1)"] == ["3", "0", "3", "0", "3", "0", "0", "3", "30000", "10000"]
    assert rows["again (C1)"] == ["3", "3", "0", "300", "0", "0", "0", "3", "30000", "10000"]


def test_refusing_server_counts_refused_stores(tmp_path):
    # cap 13500 bytes = 135 tokens, refusing: the 130-token system snapshot is stored
    # (13000 bytes), the 138-token one refused, on both passes: refused 3 and 3;
    # 3 entries x 13000 = 39000 bytes; the second pass hits 130 tokens x 3 = 390.
    out = run(tmp_path, "--sim-max-entry-bytes", "13500", "--sim-refuse-over-bytes")
    head, rows = counter_rows(out)
    assert head == COUNTER_COLS
    assert rows["prime (C1)"] == ["3", "0", "3", "0", "3", "0", "3", "3", "39000", "13000"]
    assert rows["again (C1)"] == ["3", "3", "0", "390", "0", "0", "3", "3", "39000", "13000"]
    # and per request: each stores one and refuses one, then hits 130 and refuses one again
    head, rows = md_table((out / "report.md").read_text(),
                          "Per request at C1 (native counter deltas across each request)")
    assert head[-1] == "Δ refused (entries)" and head[-3] == "Δ stores (entries)"
    assert [(r[5], r[-3], r[-1]) for r in rows if r[0] != "position · body" and set(r[0]) != {"-"}] == (
        [("0", "1", "1")] * 3 + [("130", "0", "1")] * 3
    )


def test_no_entries_held_is_absent_not_zero(tmp_path):
    # cap 50 bytes < one token (100): every snapshot is refused, nothing held
    out = run(tmp_path, "--sim-max-entry-bytes", "50")
    _, rows = counter_rows(out)
    assert rows["prime (C1)"][6:] == ["6", "0", "0", "absent: no entries held at the phase end"]


def unbounded_verdict(path: Path) -> str:
    v = {
        "format": "kvreplay-probe/1",
        "backend": "halogen",
        "prefill_fit": {"a_s": 0.05, "rate_tokens_per_s": 2000.0, "source": "ttft"},
        "warm": [],
        "bytes_per_token": 100.0,
        "bytes_per_token_kind": "prompt_cache_entry",
        "entries_per_request": 2,
        "entry_cap_bytes": 10000,
        "min_flush_k": None,
        "eviction_note": "6 foreign requests did not flush",
    }
    raw = json.dumps(v).encode()
    path.write_bytes(raw)
    return hashlib.sha256(raw).hexdigest()


CHANGES = {
    "prefill_base_s": 0.05,
    "prefill_tokens_per_s": 2000.0,
    "bytes_per_token": 100,
    "cache": "entries",
    "snapshots": 2,
    "max_entry_bytes": 10000,
    "cache_entries": 1_000_000,
}


def test_calibrated_run_keeps_its_calibration(tmp_path):
    vpath = tmp_path / "verdict.json"
    sha = unbounded_verdict(vpath)
    wl = workload(tmp_path / "wl")
    out = tmp_path / "run"
    argv = ["run", str(wl), "--target", "sim", "--out", str(out), "--quiet", *PHASES,
            "--sim-time-scale", "0.005", "--sim-from-verdict", str(vpath), "--sim-snapshots", "1"]
    assert main(argv) == 0
    cal = json.loads((out / "plan.json").read_text())["run"]["sim_calibration"]
    assert {k: cal[k] for k in ("source", "sha256", "changes", "capacity", "overridden")} == {
        "source": str(vpath), "sha256": sha, "changes": CHANGES, "capacity": "unbounded",
        "overridden": {"snapshots": 1},
    }
    assert cal["notes"][-1] == (
        "capacity: unbounded (1000000 entries): the bisection found no flushing k"
        " (6 foreign requests did not flush)"
    )
    line = (
        f"from {vpath} (sha256 {sha}); set prefill_base_s = 0.05, prefill_tokens_per_s = 2000,"
        " bytes_per_token = 100, cache = entries, snapshots = 2, max_entry_bytes = 10000,"
        " cache_entries = 1000000; capacity unbounded (the eviction bisection found no flushing k);"
        " overridden by options: snapshots = 1; recorded in plan.json"
    )
    md = (out / "report.md").read_text()
    assert f"- simulator calibration: `{line}`" in md.splitlines()
    assert html.escape(line, quote=False) in (out / "report.html").read_text()
    # the calibrated cap truncates: one 100-token snapshot (system_end 130 -> 100) per body
    _, rows = counter_rows(out)
    assert rows["prime (C1)"][-6:] == ["3", "0", "0", "3", "30000", "10000"]  # stores .. per entry


def test_serve_sim_from_verdict_reaches_the_run(tmp_path):
    vpath = tmp_path / "verdict.json"
    sha = unbounded_verdict(vpath)
    err = tmp_path / "serve-sim.stderr"
    with open(err, "wb") as ef:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvreplay", "serve-sim", "--port", "0", "--time-scale", "0.005",
             "--from-verdict", str(vpath)], stdout=subprocess.PIPE, stderr=ef)
        try:
            line = proc.stdout.readline().decode()
            assert "listening on " in line, (line, err.read_text())
            out = run(tmp_path, "--backend", "halogen", target=line.split("listening on ")[1].split()[0])
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.stdout.close()
    assert "sim calibration: capacity: unbounded (1000000 entries)" in err.read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["identity"]["before"]["version"]["calibration"] == {
        "source": str(vpath), "sha256": sha, "capacity": "unbounded", "changes": CHANGES, "overridden": {},
    }
    assert "sim_calibration" not in json.loads((out / "plan.json").read_text())["run"]
    line = (
        f"from {vpath} (sha256 {sha}); set prefill_base_s = 0.05, prefill_tokens_per_s = 2000,"
        " bytes_per_token = 100, cache = entries, snapshots = 2, max_entry_bytes = 10000,"
        " cache_entries = 1000000; capacity unbounded (the eviction bisection found no flushing k);"
        " recorded in server /version"
    )
    assert f"- simulator calibration: `{line}`" in (out / "report.md").read_text().splitlines()
    # two snapshots per body (130, 138) both truncate to the 100-token cap: one entry each
    _, rows = counter_rows(out)
    assert rows["prime (C1)"][-6:] == ["3", "0", "0", "3", "30000", "10000"]  # stores .. per entry
