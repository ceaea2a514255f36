"""``kvreplay compare SWEEP_DIR...``: several sweeps on one chart (kvreplay.sweeps.compare)."""

from kvreplay.cli import main
from kvreplay.sweeps import write_sweep


def doc(kind, loads, verified=True):
    return {"kind": kind, "cache": "cold", "target": "sim", "knee": {kind: loads[-1], "throughput_rps": 2.0},
            "points": [{kind: x, "throughput_rps": float(x), "goodput_rps": x / 2, "slo_attainment": 0.5,
                        "ttft_ms": {"p99": 10.0 * x}, "cache": {"verified": verified}} for x in loads]}


def test_two_sweeps_on_one_chart_and_kinds_must_match(tmp_path, capsys):
    a, b, r = tmp_path / "vllm-a", tmp_path / "vllm-b", tmp_path / "rate"
    for d, content in ((a, doc("concurrency", [1, 2])), (b, doc("concurrency", [1, 4], verified=False)),
                       (r, doc("rate", [1.0]))):
        d.mkdir()
        write_sweep(d, content)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
    assert "2 sweeps on one chart" in capsys.readouterr().out
    html = (tmp_path / "cmp" / "compare-sweeps.html").read_text()
    for key in ("compare-throughput", "compare-goodput", "compare-attainment", "compare-latency"):
        assert f'data-plot="{key}" data-status="measured"' in html
    assert '<th scope="row">vllm-a</th><td>cold</td><td>2 of 2</td><td>2</td>' in html
    assert '<th scope="row">vllm-b</th><td>cold</td><td>0 of 2</td><td>4</td>' in html
    assert main(["compare", str(a), str(r), "--out", str(tmp_path / "cmp2")]) == 2
    assert "vary different loads" in capsys.readouterr().err
