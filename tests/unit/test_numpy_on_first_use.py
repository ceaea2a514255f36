"""numpy is imported on first use, never by loading the run, import or report commands (issue 35).

Start-up to a run's first request is measured without numpy (bench/bench_startup.py), and
``kvreplay import`` runs under an address-space limit in tests/hostile: a module that imports
numpy at its top, anywhere below these commands, breaks both (the flat-memory ``KeySet`` did,
through ``kvreplay.evidence`` and ``rundir.planfile``). The check runs in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys


def _loads_numpy(modules: str) -> str:
    code = f"import sys\nimport {modules}\nprint('numpy' in sys.modules)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_commands_load_without_numpy():
    mods = ("kvreplay.commands.run, kvreplay.commands.import_cmd, kvreplay.commands.report, "
            "kvreplay.evidence, kvreplay.rundir, kvreplay.plan")
    assert _loads_numpy(mods) == "False"


def test_the_check_can_fail():
    assert _loads_numpy("kvreplay.evidence.bodykeys") == "True"


def test_evidence_keyset_is_still_exported():
    from kvreplay.evidence import KEY, KeySet
    from kvreplay.evidence.bodykeys import KEY as K2
    from kvreplay.evidence.bodykeys import KeySet as KS2

    assert (KEY, KeySet) == (K2, KS2) and KEY.itemsize == 16
