"""The command line's options: each has help text, and a refused value is one line naming the flag (issue 41)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvreplay.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def _subparsers():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices.items()


def test_every_option_of_every_command_has_help_text():
    missing = [f"{name} {'/'.join(a.option_strings) or a.dest}" for name, sp in _subparsers()
               for a in sp._actions if a.dest != "help" and not (a.help or "").strip()]
    assert missing == []


@pytest.mark.parametrize(("argv", "line"), [
    (["run", "--read-timeout", "x"],
     "kvreplay run: error: argument --read-timeout: not a duration: 'x' (e.g. 90s, 70m, 1h)"),
    (["run", "--sim-cache", "lru"],
     "kvreplay run: error: argument --sim-cache: invalid choice: 'lru' (choose from 'entries', 'radix')"),
    (["probe", "--no-such-flag"], "kvreplay: error: unrecognized arguments: --no-such-flag"),
])
def test_a_refused_value_is_one_line_naming_the_option(argv, line, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert capsys.readouterr().err == line + "\n"


def test_experiment_help_points_at_a_docs_section_that_exists():
    help_text = re.sub(r"-\s+", "-", dict(_subparsers())["experiment"].format_help())  # argparse's line breaks
    page, section = re.search(r"(docs/[\w/.-]+\.md), '([^']+)'", re.sub(r"\s+", " ", help_text)).groups()
    assert f"## {section}" in (ROOT / page).read_text()


def test_sim_fault_help_names_every_fault_kind():
    from kvreplay.sim.faults import FAULT_KINDS

    action = next(a for a in dict(_subparsers())["run"]._actions if "--sim-fault" in a.option_strings)
    assert f"KIND one of {', '.join(FAULT_KINDS)} " in action.help
