"""Timeout flags take durations with units, like --stop-new-after (new-user item 9)."""

from __future__ import annotations

import pytest

from kvreplay.cli import build_parser


def _parse(argv):
    return build_parser(argv).parse_args(argv)


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30.0), ("30", 30.0), ("2m", 120.0), ("1.5h", 5400.0), ("250ms", 0.25)]
)
def test_ab_timeouts_take_units(text, seconds):
    base = ["ab", "wl", "--arm", "a=sim:", "--arm", "b=sim:"]
    a = _parse([*base, "--cmd-timeout", text, "--ready-timeout", text, "--drain-timeout", text])
    assert (a.cmd_timeout, a.ready_timeout, a.drain_timeout) == (seconds, seconds, seconds)


def test_ab_timeout_defaults_unchanged():
    a = _parse(["ab", "wl", "--arm", "a=sim:", "--arm", "b=sim:"])
    assert (a.cmd_timeout, a.ready_timeout, a.drain_timeout) == (600.0, 60.0, 10.0)


def test_run_timeouts_take_units():
    a = _parse(["run", "wl", "--connect-timeout", "5s", "--read-timeout", "2m", "--total-timeout", "1h",
                "--drain-timeout", "500ms", "--keepalive-timeout", "3"])
    assert (a.connect_timeout, a.read_timeout, a.total_timeout, a.drain_timeout, a.keepalive_timeout) == (
        5.0, 120.0, 3600.0, 0.5, 3.0
    )


def test_bad_duration_is_exit_2_naming_it(capsys):
    with pytest.raises(SystemExit) as exc:
        _parse(["ab", "wl", "--arm", "a=sim:", "--arm", "b=sim:", "--cmd-timeout", "30x"])
    assert exc.value.code == 2
    assert "argument --cmd-timeout: not a duration: '30x' (e.g. 90s, 70m, 1h)" in capsys.readouterr().err


def test_run_parse_duration_and_bound_share_the_experiment_files_rules():
    import argparse

    from kvreplay.commands.run import parse_bound, parse_duration

    assert [parse_duration(x) for x in ("90", " 90s ", "70m", "1.5h", "250ms")] == [90.0, 90.0, 4200.0, 5400.0, 0.25]
    with pytest.raises(argparse.ArgumentTypeError, match=r"not a duration: '-5'"):
        parse_duration("-5")
    assert parse_bound(" host_bytes >= 34e9 ") == ("host_bytes", ">=", 34e9)
    with pytest.raises(argparse.ArgumentTypeError, match=r"not a bound: 'x=1'"):
        parse_bound("x=1")
    with pytest.raises(argparse.ArgumentTypeError, match=r"not a number in 'x>1e'"):
        parse_bound("x>1e")
