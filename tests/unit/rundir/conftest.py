"""Run-directory unit tests: the hand-built run directories of the report tests, importable as ``rundirs``."""

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent.parent / "report")
if HERE not in sys.path:
    sys.path.insert(0, HERE)
