"""Without the compiled accountant (an sdist installed without a compiler) the warning says so in words (issue 41)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"

BLOCK = """
import sys, warnings
class NoNative:
    def find_spec(self, name, path=None, target=None):
        if name == "kvreplay.accounting._sse_c":
            raise ModuleNotFoundError(name)  # as if never built
        return None
sys.meta_path.insert(0, NoNative())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from kvreplay.accounting import IMPLEMENTATION
print(IMPLEMENTATION)
print([str(w.message) for w in caught if w.category is RuntimeWarning])
"""


def test_a_missing_native_accountant_is_named_as_no_compiler_not_a_circular_import():
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("KVREPLAY_NO_EXTENSIONS", None)
    out = subprocess.run([sys.executable, "-c", BLOCK], env=env, capture_output=True, text=True, timeout=60,
                         check=True).stdout.splitlines()
    assert out == ["pure", "['kvreplay: pure-Python accountant (no compiler at install time); same results, slower']"]
