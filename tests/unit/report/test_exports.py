"""Exports: Parquet (optional extra), the public surface."""

import importlib.util

import pytest
from rundirs import plan_json, record, write_run

import kvreplay
import kvreplay.report as report
from kvreplay.report.parquet import flatten_record

HAS_PYARROW = importlib.util.find_spec("pyarrow") is not None


def test_flatten_record():
    r = record("a", 0, 0, cached=7, delta={"hits": 1})
    flat = flatten_record({**r, "usage_raw": {"x": {"y": 1}}, "itl": {"n": 3, "p50_ms": 1.5}})
    assert flat["usage.cached_tokens"] == 7 and flat["itl.n"] == 3
    assert flat["counter_delta"] == '{"hits":1}' and flat["usage_raw"] == '{"x":{"y":1}}'


@pytest.mark.skipif(
    not HAS_PYARROW, reason="pyarrow not installed (optional extra kvreplay[parquet])"
)
def test_parquet_round_trip(tmp_path):
    import pyarrow.parquet as pq

    from kvreplay.report.write import write_reports

    out = write_run(
        tmp_path / "run",
        plan_json([("a", "forward", 1, [0, 1])]),
        [record("a", 0, 0, cached=3), record("a", 1, 1, cached=9, t0_ms=30)],
    )
    written = write_reports(out, html=False, parquet=True)
    t = pq.read_table(written["parquet"])
    assert t.num_rows == 2 and t.column("usage.cached_tokens").to_pylist() == [3, 9]


def test_parquet_without_pyarrow_says_which_extra(tmp_path, monkeypatch):
    import builtins

    from kvreplay.report.parquet import write_parquet

    real = builtins.__import__

    def no_pyarrow(name, *a, **kw):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(ImportError, match=r"kvreplay\[parquet\]"):
        write_parquet([{"a": 1}], tmp_path / "x.parquet")


def test_public_surface():
    assert report.__all__ == sorted(report.__all__)
    for name in report.__all__:
        assert hasattr(report, name)
    assert "load_run" in kvreplay.__all__ and kvreplay.load_run is report.load_run


def test_runner_side_import_does_not_load_matplotlib():
    import subprocess
    import sys

    code = "import sys, kvreplay.report.markdown; print('matplotlib' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False"
