"""The fault matrix: every simulator fault x {C1, C4} through ``kvreplay run --target sim``.

Each case runs ``kvreplay.cli.main`` in-process against the embedded simulator
with one ``--sim-fault`` and reads back what the run directory says: the exit
code, the record statuses counted (``not_sent`` for positions never sent), the
abort reason in ``summary.json`` and whether the directory is valid (plan.json,
summary.json and one parseable record per planned position, the summary's
counts equal to the records', and ``kvreplay.report.load_run`` reads it).

Requests take about 0.2 s at time scale 0.05, so at C4 the first four are in
flight together when a fault on request 2 fires: an abort then leaves exactly
three requests to finish and stops every later one.

Usage::

    python bench/fault_matrix.py            # prints the markdown table
    python bench/fault_matrix.py --json m.json

tests/integration/test_fault_matrix.py asserts the outcome of each row.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"

TIME_SCALE = "0.05"
"""Simulated delays x 0.05: a request takes about 0.2 s (prefill ~ 0.2 s, 6 tokens).

Every request after the first hits the shared system block; the matrix keeps the
fixed prefill cost on hits too (``--sim-hit-base-s 1.52``, issue 18's default is 0)
so that each request still takes about 0.2 s."""

HIT_BASE_S = "1.52"

CONCURRENCIES = (1, 4)


@dataclass(frozen=True, slots=True)
class Case:
    """One row of the matrix (run at each concurrency).

    Attributes:
        name: Row label.
        fault: ``--sim-fault`` value, or None for the baseline.
        extra: Further ``kvreplay run`` options.
        phases: Phase specs with ``{c}`` standing for the concurrency.
    """

    name: str
    fault: str | None
    extra: tuple[str, ...] = ()
    phases: tuple[str, ...] = ("a:forward:c{c}:first8",)


CASES: tuple[Case, ...] = (
    Case("none", None),
    Case("http401", "http401@2"),
    Case("http403", "http403@2"),
    Case("oom500", "oom500@2"),
    Case("error-event", "error-event@2:chunks=2"),
    Case("cut", "cut@2:chunks=2"),
    Case("malformed", "malformed@2"),
    Case("stall first", "stall@2:s=3,at=first", ("--read-timeout", "1.2")),
    Case("stall between", "stall@2:s=3,at=between,chunks=2", ("--read-timeout", "1.2")),
    Case("stall, total timeout", "stall@2:s=3,at=between,chunks=2", ("--total-timeout", "1.2")),
    Case("restart", "restart@3"),
    Case("restart, --abort-on-restart", "restart@3", ("--abort-on-restart",)),
    Case("identity", "identity@2", (), ("a:forward:c{c}:first4", "b:forward:c{c}:first4")),
    Case(
        "busy-gauge",
        "busy-gauge@1:s=4",
        ("--drain-timeout", "0.5"),
        ("a:forward:c{c}:first4", "b:forward:c{c}:first4:drain"),
    ),
)


@dataclass(slots=True)
class Outcome:
    """What one run left behind.

    Attributes:
        exit_code: ``kvreplay run``'s exit status.
        statuses: Record status -> count; positions never sent count as ``not_sent``.
        aborted: ``summary.json``'s abort reason, or None.
        valid: The run directory is complete and consistent (see ``check_run_dir``).
        problems: Why it is not valid (empty when valid).
        records: The records, in file order.
        summary: ``summary.json``.
    """

    exit_code: int
    statuses: dict[str, int]
    aborted: str | None
    valid: bool
    problems: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def argv_of(case: Case, concurrency: int, out: Path) -> list[str]:
    """The ``kvreplay run`` command line of one case."""
    argv = [
        "run",
        str(MTBENCH),
        "--target",
        "sim",
        "--sim-time-scale",
        TIME_SCALE,
        "--sim-hit-base-s",
        HIT_BASE_S,
        "--sim-output-tokens",
        "6",
        "--out",
        str(out),
        "--quiet",
        *case.extra,
    ]
    if case.fault:
        argv += ["--sim-fault", case.fault]
    for p in case.phases:
        argv += ["--phase", p.format(c=concurrency)]
    return argv


def check_run_dir(out: Path) -> tuple[list[str], list[dict[str, Any]], dict[str, Any]]:
    """Check that a run directory is complete and self-consistent.

    Valid means: plan.json and summary.json parse; records.jsonl has one record
    per planned position (phase, position), each with a status; the summary's
    per-phase ``ok``, failed, and ``not_sent`` equal the records' counts; and
    ``kvreplay.report.load_run`` reads the directory.

    Returns:
        ``(problems, records, summary)``; no problems when valid.
    """
    problems: list[str] = []
    try:
        plan = json.loads((out / "plan.json").read_text())
        summary = json.loads((out / "summary.json").read_text())
        records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    except (OSError, ValueError) as exc:
        return [f"unreadable: {exc}"], [], {}
    planned = {(p["name"], s["position"]) for p in plan["phases"] for s in p["sequence"]}
    seen = [(r["phase"], r["position"]) for r in records]
    if len(seen) != len(set(seen)):
        problems.append("a position has two records")
    if set(seen) != planned:
        problems.append(f"{len(planned - set(seen))} planned positions without a record")
    for ph in summary.get("phases", []):
        mine = [r for r in records if r["phase"] == ph["name"]]
        ok = sum(r["status"] == "ok" for r in mine)
        not_sent = sum(not r["sent"] for r in mine)
        failed = Counter(r["status"] for r in mine if r["sent"] and r["status"] != "ok")
        if (ph["ok"], ph["not_sent"], ph["failed"]) != (ok, not_sent, dict(failed)):
            problems.append(f"phase {ph['name']}: summary counts differ from its records")
    if summary.get("records") != len(records):
        problems.append("summary.records differs from records.jsonl")
    try:
        from kvreplay.report import load_run

        load_run(out)
    except Exception as exc:  # noqa: BLE001 - any failure to read it back makes it invalid
        problems.append(f"load_run: {type(exc).__name__}: {exc}")
    return problems, records, summary


def run_case(case: Case, concurrency: int, out: Path) -> Outcome:
    """Run one case in-process and read back its run directory."""
    from kvreplay.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = main(argv_of(case, concurrency, out))
    problems, records, summary = check_run_dir(out)
    statuses = Counter("not_sent" if not r["sent"] else r["status"] for r in records)
    return Outcome(
        rc,
        dict(sorted(statuses.items())),
        (summary.get("aborted") or {}).get("reason"),
        not problems,
        problems,
        records,
        summary,
    )


def notes(o: Outcome) -> str:
    """Short notes on an outcome: timeout kinds, counter resets, phases marked invalid."""
    out = []
    for text in dict.fromkeys(
        f"timeout_kind {r['timeout_kind']} ({r['error']})"
        for r in o.records
        if r["status"] == "timeout"
    ):
        out.append(text)
    resets = sum(bool((r.get("counter_delta") or {}).get("reset")) for r in o.records)
    if resets:
        out.append(f"{resets} record counter delta reset")
    for ph in o.summary.get("phases", []):
        for why in ph.get("invalid_reasons", []):
            if "restarted" in why or "drain" in why:
                out.append(f"phase {ph['name']} invalid: {why.split(':')[0]}")
    return "; ".join(out) or "-"


def table(rows: list[tuple[Case, int, Outcome]]) -> str:
    """The matrix as a markdown table."""
    lines = [
        "| fault (`--sim-fault`) | C | exit | statuses | abort reason | valid run dir | notes |",
        "|---|---|---|---|---|---|---|",
    ]
    for case, c, o in rows:
        spec = f"`{case.fault}`" if case.fault else "(none)"
        if case.extra:
            spec += " `" + " ".join(case.extra) + "`"
        sts = ", ".join(f"{k} {v}" for k, v in o.statuses.items())
        lines.append(
            f"| {spec} | {c} | {o.exit_code} | {sts} | {o.aborted or '-'} | "
            f"{'yes' if o.valid else 'NO: ' + '; '.join(o.problems)} | {notes(o)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the whole matrix and print its table; 1 when a run directory is invalid."""
    ap = argparse.ArgumentParser(
        description="Run every simulator fault at C1 and C4; print a markdown table."
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the outcomes as JSON")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvreplay-matrix-") as tmp:
        for i, case in enumerate(CASES):
            for c in CONCURRENCIES:
                rows.append((case, c, run_case(case, c, Path(tmp) / f"{i}-c{c}")))
    print(table(rows))
    if args.json:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "case": case.name,
                        "fault": case.fault,
                        "extra": list(case.extra),
                        "concurrency": c,
                        "exit_code": o.exit_code,
                        "statuses": o.statuses,
                        "aborted": o.aborted,
                        "valid": o.valid,
                        "problems": o.problems,
                    }
                    for case, c, o in rows
                ],
                indent=2,
            )
            + "\n"
        )
    return 0 if all(o.valid for _, _, o in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
