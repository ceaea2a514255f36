"""The pytest plugin (kvreplay.pytest_plugin) as a user's suite meets it, through pytester.

The inner sessions load the plugin with ``-p`` unless the installed kvreplay already
registers it (entry point ``pytest11``), which loads it by itself.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "fixtures" / "workloads" / "mtbench-52"
AUTOLOADED = any(ep.value == "kvreplay.pytest_plugin" for ep in entry_points(group="pytest11"))
PLUGIN = [] if AUTOLOADED else ["-p", "kvreplay.pytest_plugin"]

USER_TEST = f'''
def test_prefix_cache(kvreplay):
    r = kvreplay.replay({str(WORKLOAD)!r}, phases=["prime:forward:c1:first8", "replay:reverse:c1:first8"])
    assert r.phase("replay").cached_ratio >= THRESHOLD
'''


def test_without_a_target_the_test_is_skipped_with_the_reason(pytester: pytest.Pytester):
    pytester.makepyfile(USER_TEST.replace("THRESHOLD", "0.9"))
    result = pytester.runpytest(*PLUGIN, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*kvreplay: no target (give --kvreplay-target URL, or --kvreplay-sim*"])


@pytest.mark.slow
def test_prefix_cache_passes_against_the_simulator_and_fails_with_the_table(pytester: pytest.Pytester):
    # first8 forward then reverse: the replay finds 27938 of its 28003 prompt tokens cached
    # (0.99768, the simulator's answer at time scale 0): 0.9 passes, 0.998 fails
    pytester.makepyfile(test_ok=USER_TEST.replace("THRESHOLD", "0.9"),
                        test_too_high=USER_TEST.replace("THRESHOLD", "0.998"))
    result = pytester.runpytest(*PLUGIN, "--kvreplay-sim")
    result.assert_outcomes(passed=1, failed=1)
    # the failure shows the phase table and the run directory of the run the test made
    result.stdout.fnmatch_lines([
        "*kvreplay runs*",
        "run directory: */kvreplay/run1",
        "| phase *| C *| ok/planned*",
        "| prime | 1 | 8/8 | 0 |*| 24136/28003 |*",
        "| replay | 1 | 8/8 | 0 |*| 27938/28003 |*",
    ])
    assert "test_ok" not in "".join(line for line in result.stdout.lines if "run directory" in line)


def test_options_are_listed_in_help(pytester: pytest.Pytester):
    result = pytester.runpytest(*PLUGIN, "--help")
    result.stdout.fnmatch_lines(["*--kvreplay-target=URL*", "*--kvreplay-sim*", "*--kvreplay-backend=NAME*"])


def test_a_target_url_is_used_as_given(pytester: pytest.Pytester):
    pytester.makepyfile('''
def test_target(kvreplay):
    assert (kvreplay.target, kvreplay.backend) == ("http://127.0.0.1:9", "vllm")
''')
    result = pytester.runpytest(*PLUGIN, "--kvreplay-target", "http://127.0.0.1:9", "--kvreplay-backend", "vllm")
    result.assert_outcomes(passed=1)


def test_with_reset_empties_the_cache_before_the_first_phase_only():
    from kvreplay.pytest_plugin import KvreplayFixture

    assert KvreplayFixture.with_reset(["prime:forward:c1", "replay:reverse:c1"]) == [
        "prime:forward:c1:reset", "replay:reverse:c1"]
    assert KvreplayFixture.with_reset(["a:forward:c1:reset"]) == ["a:forward:c1:reset"]
    assert KvreplayFixture.with_reset([]) == []


def test_reset_cache_puts_the_reset_in_the_runs_plan(pytester: pytest.Pytester):
    pytester.makepyfile(f'''
import json

def test_reset(kvreplay):
    r = kvreplay.replay({str(WORKLOAD)!r}, phases=["a:forward:c1:first2", "b:forward:c1:first2"], reset_cache=True)
    plan = json.loads((r.run_dir / "plan.json").read_text())
    assert [p["reset"] for p in plan["phases"]] == [True, False]
    assert [p.valid for p in r.phases] == [True, True]  # the simulator empties its cache when asked
''')
    result = pytester.runpytest_subprocess(*PLUGIN, "--kvreplay-sim")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(("args", "message"), [
    (["--kvreplay-sim", "--kvreplay-target", "http://127.0.0.1:9"],
     "*--kvreplay-sim and --kvreplay-target name two targets: give one of them*"),
    (["--kvreplay-sim", "--kvreplay-backend", "bogus"], "*--kvreplay-backend 'bogus' is not a counter adapter*"),
])
def test_contradicting_options_are_refused(pytester: pytest.Pytester, args, message):
    """Issue 44 lows: before, the target won over --kvreplay-sim silently and a bogus backend was ignored."""
    pytester.makepyfile(USER_TEST.replace("THRESHOLD", "0.9"))
    result = pytester.runpytest(*PLUGIN, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
