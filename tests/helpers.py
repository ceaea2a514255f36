"""Plain helpers shared by tests (importable as ``helpers``; tests/ is on pythonpath)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
MTBENCH = FIXTURES / "workloads" / "mtbench-52"


def write_chat_workload(folder: Path, systems_and_users: list[tuple[str, str]], **extra) -> Path:
    """Write one chat body per (system, user) pair as NNN.json; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, (system, user) in enumerate(systems_and_users):
        body = {"model": "m", "messages": [{"role": "system", "content": system},
                                            {"role": "user", "content": user}],
                "max_tokens": 8, "stream": True, "stream_options": {"include_usage": True}, **extra}
        (folder / f"{i:03d}.json").write_text(json.dumps(body))
    return folder
