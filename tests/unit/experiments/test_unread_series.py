"""Issue 27 item 3: series the server exposes and the backend does not read are stated."""

from __future__ import annotations

from pathlib import Path

from kvreplay.cli import main
from kvreplay.experiments.publish import with_caveats
from kvreplay.experiments.unread import sim_metrics_text, unread_series

SIM = {"cache": "radix", "host_rows": 52}


def test_vllm_on_the_simulator_leaves_the_host_tier_and_the_drain_gauges_unread():
    got = unread_series(sim_metrics_text(SIM), "vllm")
    assert got["profile"] == "sim"
    assert got["drain_gauges"] == ["retiring", "transfers_in_flight", "transfers_waiting"]
    assert {"host_lookups", "host_hits", "host_reused_tokens", "retiring"} <= set(got["common"])
    assert "kvreplay_sim:requests_retiring" in got["series"]
    assert got["message"].startswith("backend vllm does not read 14 series the server exposes (")
    assert got["message"].endswith("; the drain will not wait for retiring, transfers_in_flight, "
                                   "transfers_waiting; --backend prometheus --profile sim reads them")


def test_the_profile_that_maps_them_leaves_nothing_unread():
    assert unread_series(sim_metrics_text(SIM), "prometheus", "sim") is None
    assert unread_series(sim_metrics_text(SIM), "none") is None


def test_dry_run_warns_and_names_the_profile(tmp_path, capsys):
    wl = Path(__file__).resolve().parents[3] / "fixtures" / "workloads" / "mtbench-52"
    f = tmp_path / "w.toml"
    f.write_text(f'workload = "{wl}"\n[server]\ntarget = "sim"\nbackend = "vllm"\n'
                 '[[step]]\nname = "A"\nkind = "run"\nphases = ["p:forward:c1:first2"]\n')
    assert main(["experiment", str(f), "--dry-run", "--out", str(tmp_path / "x")]) == 0
    out = capsys.readouterr().out
    assert "warning: backend vllm does not read " in out and "--backend prometheus --profile sim reads them" in out
    assert "the drain will not wait for retiring" in out


def test_caveats_on_the_cells_they_touch():
    unread = {"backend": "vllm", "common": ["host_lookups", "host_hits", "retiring"], "drain_gauges": ["retiring"],
              "profile": "sim"}
    frozen = {"steps": [{"name": "A", "plan": {"phases": [{"name": "prime"}, {"name": "replay", "drain": True}]}}]}
    cells = [{"step": "A", "metric": "prime.host_fetched_tokens"}, {"step": "A", "metric": "prime.hit_tokens"},
             {"step": "A", "metric": "replay.ttft_p50_ms"}]
    out = with_caveats(cells, frozen, unread)
    assert out[0]["caveats"] == ["unread_series: backend vllm does not read host_lookups, host_hits (sim reads them)"]
    assert "caveats" not in out[1]
    assert out[2]["caveats"] == ["drain_unchecked: the drain did not wait for retiring (sim reads them)"]
    assert with_caveats([{"step": "A", "metric": "prime.hit_tokens"}], frozen, None) == [
        {"step": "A", "metric": "prime.hit_tokens"}]
