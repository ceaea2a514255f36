"""Only the command line knows argparse (issue 41): the modules moved off it stay off it.

A ratchet: the modules and packages listed here neither import argparse nor name it or its
``Namespace`` anywhere in their text (docstrings and comments included). The rest of ``api/``
follows command by command (the list grows as each moves; see docs/architecture.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "kvreplay"
CLEAN = ["options", "sim", "recorder", "api/runflow", "api/run.py", "api/fleet.py", "api/demo_defaults.py",
         "api/__init__.py", "api/results.py", "api/_keywords.py", "api/sweeping.py", "sweeps",
         "api/synthesis.py", "api/probing.py", "experiments/probe",
         "api/abtest.py", "experiments/ab", "api/simulation.py",
         "api/inspection.py", "api/snapshots.py",
         "api/comparison.py", "api/exporting.py",
         "api/recording.py", "api/fitting.py",
         "api/serving.py"]


def _files(entry: str) -> list[Path]:
    path = SRC / entry
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


@pytest.mark.parametrize("entry", CLEAN)
def test_the_module_knows_nothing_of_argparse(entry):
    files = _files(entry)
    assert files
    named = [str(f.relative_to(SRC)) for f in files if "argparse" in f.read_text() or "Namespace" in f.read_text()]
    assert named == []
