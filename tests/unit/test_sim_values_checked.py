"""A simulator value that is not a finite number in range is refused before anything is made (issue 30, lesser items).

``--sim-time-scale nan`` used to be accepted: every request failed, exit 0. Now exit 2,
the flag named, and no run directory left behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreplay.cli import main

WL = Path(__file__).resolve().parents[2] / "fixtures" / "workloads" / "mtbench-52"


@pytest.mark.parametrize(("flag", "value", "why"), [
    ("--sim-time-scale", "nan", "must be a finite number >= 0, not nan"),
    ("--sim-time-scale", "inf", "must be a finite number >= 0, not inf"),
    ("--sim-time-scale", "-0.5", "must be a finite number >= 0, not -0.5"),
    ("--sim-itl-s", "nan", "must be a finite number >= 0, not nan"),
    ("--sim-prefill-rate", "0", "must be a finite number > 0, not 0.0"),
    ("--sim-prefill-rate", "nan", "must be a finite number > 0, not nan"),
])
def test_bad_simulator_numbers_exit_2_naming_the_flag_and_make_no_run_directory(tmp_path, capsys, flag, value, why):
    out = tmp_path / "run"
    rc = main(["run", str(WL), "--target", "sim", "--phase", "a:forward:c1:first1", flag, value,
               "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip() == f"kvreplay: error: field '{flag}': {why}"
    assert not out.exists()
