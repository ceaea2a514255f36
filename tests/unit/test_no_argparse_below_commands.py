"""Only the command line knows argparse (issue 41): the modules moved off it stay off it.

A ratchet: the modules and packages listed here neither import argparse nor name it or its
``Namespace`` anywhere in their text (docstrings and comments included). Every command's
options are declared in ``kvreplay.options`` and its flags derived in ``commands/`` (see
docs/architecture.md), so all of ``api/`` is held.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "kvreplay"
CLEAN = ["options", "sim", "recorder", "api", "sweeps", "experiments/probe", "experiments/ab", "workload"]


def _files(entry: str) -> list[Path]:
    path = SRC / entry
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


@pytest.mark.parametrize("entry", CLEAN)
def test_the_module_knows_nothing_of_argparse(entry):
    files = _files(entry)
    assert files
    named = [str(f.relative_to(SRC)) for f in files if "argparse" in f.read_text() or "Namespace" in f.read_text()]
    assert named == []


def test_only_the_command_line_and_the_dev_scripts_know_argparse():
    # cli.py, commands/ and argtypes.py (the flags' checks) build parsers; the testing package's
    # model-writing scripts (``python -m kvreplay.testing._tiny_hf``...) have their own command lines.
    allowed = {"cli.py", "argtypes.py", "testing/_tiny_gguf.py", "testing/_tiny_hf.py", "testing/_vocab.py"}
    named = sorted(str(f.relative_to(SRC)) for f in SRC.rglob("*.py")
                   if f.relative_to(SRC).parts[0] != "commands"
                   and ("argparse" in f.read_text() or "Namespace" in f.read_text()))
    assert sorted(set(named) - allowed) == []
    assert sorted(allowed - set(named)) == []
