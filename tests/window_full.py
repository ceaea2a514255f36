"""What the tests of the bundled whole window share (``fixtures/experiments/host-cache-window-full.toml``).

Importable as ``window_full`` (tests/ is on pythonpath). Used by
``tests/integration/test_experiment_window_full.py`` (the variants) and
``tests/integration/test_window_points.py`` (the plan's 31 points on one shared run).
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FULL = ROOT / "fixtures" / "experiments" / "host-cache-window-full.toml"
MAIN = ROOT / "fixtures" / "workloads" / "window-main"
AB = ROOT / "fixtures" / "workloads" / "window-ab-1024"
CHECKS = ["containment", "monitoring", "preflight_direct", "preflight_routed", "readmission"]
SNAPSHOTS = ["router", "monitoring", "gpu", "rollback", "configuration"]
STEPS = [("quiesce", "quiesce"), ("A0", "incarnation"), ("A", "run"), ("B0", "incarnation"), ("B", "run"),
         ("control", "run"), ("trace", "ab"), ("restore", "restore")]
STEP_NO = {name: i for i, (name, _k) in enumerate(STEPS)}

# Hand-derived figures of the window's simulator (``[server.sim]``: 37 device blocks, 40
# leaf-lru host rows) over window-main (16 bodies; fixtures/workloads/build_window.py). Each
# prompt renders to N = 654 tokens, its messages to M = 650 (kvreplay.sim.tokenizer); the
# shared system block ends at 605, so the device keeps its 37 full blocks, D = 592 tokens,
# and every request after the first hits D on the device (docs/simulator.md, radix).
# A host checkpoint on the prompt credits min(N, N - 1) = 653 tokens (fetched 653 - 592 = 61),
# one on the messages 650 (fetched 58). Each miss stores 3 rows (m, p, t): 3 + 1 + 1 pages of
# 256 tokens, 5 x 256 x 147,456 bytes = 188,743,680 bytes per body.
N, M, D = 654, 650, 592
P_CREDIT, P_FETCH, M_FETCH = N - 1, N - 1 - D, M - D
BODY_BYTES = 5 * 256 * 147_456
SIM = ("{'cache': 'radix', 'time_scale': 0.001, 'output_tokens': 8, 'device_blocks': 37, 'host_rows': 40, "
       "'host_evict': 'leaf-lru'}")


def window_copy(tmp_path: Path, text: str) -> Path:
    """Write ``text`` as ``tmp_path/experiments/window.toml`` beside copies of its two workloads; returns its path."""
    exp_dir = tmp_path / "experiments"
    exp_dir.mkdir()
    shutil.copytree(MAIN, tmp_path / "workloads" / "window-main")
    shutil.copytree(AB, tmp_path / "workloads" / "window-ab-1024")
    f = exp_dir / "window.toml"
    f.write_text(text)
    return f
