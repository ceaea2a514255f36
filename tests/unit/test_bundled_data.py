"""The package data (src/kvreplay/data, what the wheel ships) is the fixtures' copy, byte for byte.

The tests read ``fixtures/``; ``kvreplay demo`` and the examples read the packaged copy
(``kvreplay.bundled``). An edit to one without the other fails here.
"""

from pathlib import Path

from kvreplay.bundled import DATA, DEMO_WORKLOAD, bundled

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [("workloads/mtbench-52", "*.json"), ("workloads/window-main", "*.json"),
         ("workloads/window-ab-1024", "*.json"), ("workloads/conversations", "*"), ("plans", "*.toml"),
         ("experiments", "*"), ("sim", "*.toml")]


def test_packaged_copy_is_identical_to_the_fixtures():
    for sub, pattern in PAIRS:
        fixture = sorted(p.name for p in (ROOT / "fixtures" / sub).glob(pattern))
        packaged = sorted(p.name for p in (DATA / sub).glob(pattern))
        assert packaged == fixture, sub
        for name in fixture:
            assert (DATA / sub / name).read_bytes() == (ROOT / "fixtures" / sub / name).read_bytes(), f"{sub}/{name}"


def test_demo_workload_and_lookup():
    assert len(list(DEMO_WORKLOAD.glob("*.json"))) == 52
    assert bundled("experiments/probe-sizing.toml").is_file()
    try:
        bundled("experiments/nope.toml")
    except FileNotFoundError as exc:
        assert "nope.toml" in str(exc)
    else:
        raise AssertionError("a missing bundled file must raise")
