"""The correctness gate of an A/B: the arms' outputs compared, not only their timings.

A follow-on A/B (a trace toggle, a kernel flag) must not buy its speed with different
answers. An ab step's ``correctness`` key (``experiments.steps.ab``) reads every block's
``records.jsonl`` after the A/B and checks, per sent request:

- ``"valid"``: it ended ``ok`` with ``finish_reason`` ``stop`` or ``length`` and visible
  text (``visible``), in every arm;
- ``"exact"``: that, and its output equals the reference: the first ``ok`` answer to the
  same body (``body_sha256``) in the baseline arm's first block. Compared in order:
  ``finish_reason``, the number of content deltas (the output's streamed pieces) and the
  kept text (``text_head``, the runner's first 256 characters; ``--no-text`` leaves none,
  and then the text is not compared). Meant for deterministic answers (temperature 0, a
  seed, or the simulator); sampled answers at temperature 1 use ``"valid"``.

The result, ``{"mode", "ok", "checked", "failures", "first"}``, is kept in the step's
``checks.correctness``; the step is ``failed`` with ``correctness: FIRST`` when it is not
ok, so its verdict never reads as if the outputs were equal (its cells carry the failure).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreplay.rundir import RECORDS, read_records

__all__ = ["MODES", "check_outputs"]

MODES = ("valid", "exact")
"""The gate's modes (module docstring)."""


def _invalid(r: dict[str, Any]) -> str | None:
    if r.get("status") != "ok":
        return f"status {r.get('status')}"
    if r.get("finish_reason") not in ("stop", "length"):
        return f"finish_reason {r.get('finish_reason')!r}"
    if not r.get("visible"):
        return "no visible text"
    return None


def _differs(r: dict[str, Any], ref: dict[str, Any], base: str) -> str | None:
    if r.get("finish_reason") != ref.get("finish_reason"):
        return f"finish_reason {r.get('finish_reason')!r}, arm {base}'s {ref.get('finish_reason')!r}"
    if r.get("content_deltas") != ref.get("content_deltas"):
        return f"{r.get('content_deltas')} content deltas, arm {base}'s {ref.get('content_deltas')}"
    a, b = r.get("text_head"), ref.get("text_head")
    if a is not None and b is not None and a != b:
        return f"text {a[:40]!r}, arm {base}'s {b[:40]!r}"
    return None


def check_outputs(ab_dir: Path, blocks: list[dict[str, Any]], baseline: str, mode: str) -> dict[str, Any]:
    """The gate over an A/B's blocks (module docstring).

    Args:
        ab_dir: The A/B's folder (``ab.json``'s).
        blocks: ``ab.json``'s ``blocks`` (each ``{"arm", "dir", ...}``), in run order.
        baseline: The baseline arm's name (the first of ``arms``).
        mode: ``"valid"`` or ``"exact"``.

    Returns:
        ``{"mode", "ok", "checked", "failures", "first"}``: requests checked, how many failed,
        and the first failure as ``body 1 (sha256 0123456789ab), arm on, block 01-on, c1:
        4 content deltas, arm off's 8`` (None when ok). No request checked is not ok.

    Raises:
        ValueError: ``mode`` is not one of ``MODES``.
    """
    if mode not in MODES:
        raise ValueError(f"correctness is one of {', '.join(MODES)}, not {mode!r}")
    recs = [(b, r) for b in blocks for r in read_records(ab_dir / b["dir"] / RECORDS) if r.get("sent")]
    ref: dict[str, dict[str, Any]] = {}
    if mode == "exact":
        for b, r in recs:
            if b["arm"] == baseline and _invalid(r) is None:
                ref.setdefault(str(r.get("body_sha256")), r)
    checked, failures, first = 0, 0, None
    for b, r in recs:
        checked += 1
        why = _invalid(r)
        if why is None and mode == "exact":
            sha = str(r.get("body_sha256"))
            why = (f"no valid answer to it in arm {baseline}" if sha not in ref
                   else _differs(r, ref[sha], baseline))
        if why is not None:
            failures += 1
            if first is None:
                first = (f"body {r.get('body_index')} (sha256 {str(r.get('body_sha256'))[:12]}), arm {b['arm']}, "
                         f"block {Path(b['dir']).name}, {r.get('phase')}: {why}")
    if checked == 0:
        first = "no request was sent"
    return {"mode": mode, "ok": checked > 0 and failures == 0, "checked": checked, "failures": failures,
            "first": first}
