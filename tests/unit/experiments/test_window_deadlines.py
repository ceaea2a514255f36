"""Deadlines are checked wherever they come from (issue 27 item 4).

``--hard-deadline 12s`` with the file's ``restore_reserve = "40s"`` used to abort the window
at 0.3 s ("0 s reached during the step"): the file loader refused such a file, but command-line
overrides were not checked. Now the same checks run on the window as overridden, naming the
flag; ``--restore-reserve`` overrides the reserve.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreplay.cli import main
from kvreplay.errors import ConfigError
from kvreplay.experiments.window.spec import WindowSpec

WL = Path(__file__).resolve().parents[3] / "fixtures" / "workloads" / "mtbench-52"


def exp_file(tmp_path: Path, window: str) -> Path:
    p = tmp_path / "e.toml"
    p.write_text(f'workload = "{WL}"\n[server]\ntarget = "sim"\n[window]\n{window}\n'
                 '[[step]]\nname = "a"\nkind = "incarnation"\n')
    return p


@pytest.mark.parametrize(("window", "flags", "message"), [
    ('restore_reserve = "40s"', ["--hard-deadline", "12s"],
     "field 'window.restore_reserve': restore_reserve (40 s) leaves no time before --hard-deadline (12 s): "
     "in-flight requests would be cancelled before anything ran"),
    ('hard_deadline = "60s"', ["--restore-reserve", "60s"],
     "field '--restore-reserve': --restore-reserve (60 s) leaves no time before hard_deadline (60 s): "
     "in-flight requests would be cancelled before anything ran"),
    ('hard_deadline = "90s"\nrestore_reserve = "20s"', ["--stop-new-after", "71s"],
     "field '--stop-new-after': --stop-new-after (71 s) is later than hard_deadline - restore_reserve "
     "(90 - 20 = 70 s)"),
])
def test_command_line_deadlines_get_the_file_checks(tmp_path, capsys, window, flags, message):
    f = exp_file(tmp_path, window)
    out = tmp_path / "exp"
    rc = main(["experiment", str(f), "--out", str(out), "--quiet", *flags])
    assert rc == 2 and not out.exists()
    assert capsys.readouterr().err.strip() == f"kvreplay: error: {f}, {message}"


def test_the_boundary_itself_is_allowed():
    # stop_new_after exactly at hard_deadline - restore_reserve: the last request may start then
    WindowSpec(stop_new_after_s=70.0, hard_deadline_s=90.0, restore_reserve_s=20.0).check()
    WindowSpec(hard_deadline_s=12.0, restore_reserve_s=11.9).check()
    with pytest.raises(ConfigError, match=r"stop_new_after \(70.5 s\) is later than"):
        WindowSpec(stop_new_after_s=70.5, hard_deadline_s=90.0, restore_reserve_s=20.0).check()
    with pytest.raises(ConfigError, match=r"restore_reserve \(12 s\) leaves no time before hard_deadline \(12 s\)"):
        WindowSpec(hard_deadline_s=12.0, restore_reserve_s=12.0).check()
