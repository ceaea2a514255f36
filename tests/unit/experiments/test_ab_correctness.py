"""The A/B correctness gate (experiments.ab.correctness) on hand-written records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvreplay.experiments.ab.correctness import check_outputs

OK = {"sent": True, "status": "ok", "finish_reason": "stop", "visible": True, "content_deltas": 8, "phase": "c1"}


def _block(root: Path, name: str, recs: list[dict]) -> dict:
    d = root / "blocks" / name
    d.mkdir(parents=True)
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return {"arm": name.split("-", 1)[1], "dir": f"blocks/{name}"}


def test_exact_and_valid_by_hand(tmp_path):
    a0 = {**OK, "body_index": 0, "body_sha256": "a" * 64, "text_head": "one two"}
    a1 = {**OK, "body_index": 1, "body_sha256": "b" * 64, "text_head": "three"}
    blocks = [_block(tmp_path, "00-off", [a0, a1]),
              _block(tmp_path, "01-on", [a0, {**a1, "text_head": "four"}, {"sent": False}]),
              _block(tmp_path, "02-on", [{**a0, "finish_reason": "length"}, {**a1, "status": "error"}])]
    # exact: block 01's body 1 text, block 02's body 0 finish reason and body 1 status: 3 of 6
    assert check_outputs(tmp_path, blocks, "off", "exact") == {
        "mode": "exact", "ok": False, "checked": 6, "failures": 3,
        "first": f"body 1 (sha256 {'b' * 12}), arm on, block 01-on, c1: text 'four', arm off's 'three'"}
    # valid: only the failed request (a "length" finish is a valid answer)
    assert check_outputs(tmp_path, blocks, "off", "valid") == {
        "mode": "valid", "ok": False, "checked": 6, "failures": 1,
        "first": f"body 1 (sha256 {'b' * 12}), arm on, block 02-on, c1: status error"}
    assert check_outputs(tmp_path, blocks[:2][:1], "off", "exact")["ok"] is True
    assert check_outputs(tmp_path, [], "off", "valid") == {"mode": "valid", "ok": False, "checked": 0,
                                                           "failures": 0, "first": "no request was sent"}
    with pytest.raises(ValueError, match="correctness is one of valid, exact, not 'same'"):
        check_outputs(tmp_path, blocks, "off", "same")
