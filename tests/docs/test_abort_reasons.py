"""Every ``aborted.reason`` the runner writes is in docs/summary-schema.md's list.

The reasons are the string literals passed to ``_Run.request_abort`` / ``cancel_in_flight``
(``runner/_runner.py``) anywhere under ``src/kvreplay/runner``, directly or through
``loop.call_later``. ``target_unusable``, ``hard_deadline``, ``disk_full``,
``client_resources``, ``replica_lost`` and ``body_changed`` were written but not listed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CALL = re.compile(r"(?:request_abort|cancel_in_flight)\b(?:\(|,)\s*\"([a-z_]+)\"")


def _written() -> set[str]:
    found: set[str] = set()
    for p in (ROOT / "src" / "kvreplay" / "runner").rglob("*.py"):
        found |= set(CALL.findall(p.read_text(encoding="utf-8")))
    return found


def test_every_abort_reason_the_runner_writes_is_documented():
    written = _written()
    assert {"interrupt", "auth", "target_unusable", "hard_deadline", "disk_full"} <= written  # the scan works
    schema = (ROOT / "docs" / "summary-schema.md").read_text(encoding="utf-8")
    (row,) = [ln for ln in schema.splitlines() if ln.startswith("| `aborted` |")]
    documented = set(re.findall(r"`([a-z_]+)`", row))
    assert sorted(written - documented) == []
