"""Probe step settings and cells (``kvreplay.experiments.probe.step``), no server."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreplay.errors import ConfigError
from kvreplay.experiments.probe.step import probe_cells, probe_config, probe_settings

P = Path("e.toml")


def settings(**kw):
    return probe_settings(kw, path=P, line=9, fld="step[2]")


def test_defaults_are_kvreplay_probes():
    s = settings()
    assert s == {"sizes": [8192, 16384, 32768, 65536], "cold_repeats": 1, "flush_prefix_tokens": 8192,
                 "foreign_tokens": 1024, "flush_max": 32, "flush_repeats": 2, "fit_on": "ttft", "model": None,
                 "nonce": None, "backend": None, "read_timeout_s": 600.0, "drain_timeout_s": 10.0}
    cfg = probe_config(s)
    assert (cfg.sizes, cfg.flush_prefix_tokens, cfg.foreign_tokens, cfg.flush_max, cfg.flush_repeats,
            cfg.fit_on, cfg.drain_timeout_s) == ((8192, 16384, 32768, 65536), 8192, 1024, 32, 2, "ttft", 10.0)


def test_sizes_forms_and_durations():
    s = settings(sizes=["2k", 3000, "4096"], flush_prefix=512, foreign_tokens="2k", read_timeout="2m",
                 drain_timeout=5, nonce="n1", model="m")
    assert s["sizes"] == [2048, 3000, 4096] and s["flush_prefix_tokens"] == 512 and s["foreign_tokens"] == 2048
    assert (s["read_timeout_s"], s["drain_timeout_s"], s["nonce"], s["model"]) == (120.0, 5.0, "n1", "m")
    assert probe_config(s).nonce == "n1"


@pytest.mark.parametrize(("kw", "field", "msg"), [
    ({"sizes": []}, "step[2].sizes", "no sizes"),
    ({"sizes": ["8"]}, "step[2].sizes[0]", "under 16 tokens"),
    ({"sizes": 8192}, "step[2].sizes", "sizes is"),
    ({"flush_prefix": "1k,2k"}, "step[2].flush_prefix", "one token count"),
    ({"cold_repeats": True}, "step[2].cold_repeats", "integer >= 1"),
    ({"flush_max": -1}, "step[2].flush_max", "integer >= 0"),
    ({"fit_on": "e2e"}, "step[2].fit_on", "must be one of"),
    ({"backend": ""}, "step[2].backend", "non-empty string"),
    ({"read_timeout": "soon"}, "step[2].read_timeout", "not a duration"),
])
def test_bad_values_name_the_field(kw, field, msg):
    with pytest.raises(ConfigError, match=msg) as ei:
        settings(**kw)
    assert (ei.value.path, ei.value.line, ei.value.field) == (P, 9, field)


VERDICT = {"prefill_fit": {"a_s": 0.304, "rate_tokens_per_s": 6850.0, "r2": 0.9999, "source": "stream"},
           "cmax_tokens": 65510, "bytes_per_token": None, "min_flush_k": None,
           "eviction_note": "32 foreign requests did not flush the prefix; raise --flush-max",
           "config": {"fit_on": "stream"}}


def test_cells_from_a_verdict():
    got = probe_cells("P", "measured", None, {"flush_max": 32}, VERDICT)
    assert [(c["metric"], c["status"], c["value"], c["reason"]) for c in got] == [
        ("prefill_fit.a_s", "measured", 0.304, None),
        ("prefill_fit.rate_tokens_per_s", "measured", 6850.0, None),
        ("prefill_fit.r2", "measured", 0.9999, None),
        ("cmax_tokens", "measured", 65510, None),
        ("bytes_per_token", "absent", None, "the backend reports no entry or pool bytes"),
        ("min_flush_k", "failed", None, "32 foreign requests did not flush the prefix; raise --flush-max"),
    ]
    assert all(c["step"] == "P" for c in got)


def test_cells_without_a_verdict_take_the_step_status():
    got = probe_cells("P", "aborted", "window: cut", {"flush_max": 0}, None)
    assert [c["metric"] for c in got] == ["prefill_fit.a_s", "prefill_fit.rate_tokens_per_s", "prefill_fit.r2",
                                          "cmax_tokens", "bytes_per_token"]
    assert {(c["status"], c["value"], c["reason"]) for c in got} == {("aborted", None, "window: cut")}
    assert {c["status"] for c in probe_cells("P", "measured", None, {"flush_max": 4}, None)} == {"failed"}
    nofit = probe_cells("P", "measured", None, {"flush_max": 0}, {"config": {"fit_on": "server"}})
    assert nofit[0]["status"] == "failed" and "on the server series" in nofit[0]["reason"]


def test_cells_of_a_probe_cut_in_its_eviction_legs():
    # cut after the cold and warm legs of 4 sizes and 2 of up to 7 eviction points (flush_max 32:
    # k 0, 32, 16, 8, 4, 2, 1): the fit's group was complete and stays measured; Cmax and bytes
    # per token read every leg and are partial; the bisection is partial and found no k.
    v = dict(VERDICT, bytes_per_token=4096.0,
             stopped={"reason": "stop_new_after", "requests": 70, "cold": [4, 4], "warm": [4, 4],
                      "eviction_points": [2, 7]})
    why = "deadline: no new probe requests after 60 s"
    got = probe_cells("P", "aborted", why, {"flush_max": 32}, v)
    assert [(c["metric"], c["status"], c["value"], c["reason"]) for c in got] == [
        ("prefill_fit.a_s", "measured", 0.304, None),
        ("prefill_fit.rate_tokens_per_s", "measured", 6850.0, None),
        ("prefill_fit.r2", "measured", 0.9999, None),
        ("cmax_tokens", "aborted", 65510, f"partial: 70 probe requests sent ({why})"),
        ("bytes_per_token", "aborted", 4096.0, f"partial: 70 probe requests sent ({why})"),
        ("min_flush_k", "aborted", None, f"partial: 2 of up to 7 eviction points measured ({why})"),
    ]


def test_cells_of_a_probe_cut_before_any_leg():
    v = {"prefill_fit": None, "cmax_tokens": None, "bytes_per_token": None, "min_flush_k": None,
         "stopped": {"reason": "stop_new_after", "requests": 0, "cold": [0, 2], "warm": [0, 2],
                     "eviction_points": [0, 0]}}
    got = probe_cells("P", "aborted", "R", {"flush_max": 0}, v)
    assert [(c["metric"], c["status"], c["value"], c["reason"]) for c in got] == [
        ("prefill_fit.a_s", "deferred", None, "not run: 0 of 2 cold legs sent (R)"),
        ("prefill_fit.rate_tokens_per_s", "deferred", None, "not run: 0 of 2 cold legs sent (R)"),
        ("prefill_fit.r2", "deferred", None, "not run: 0 of 2 cold legs sent (R)"),
        ("cmax_tokens", "deferred", None, "not run: 0 probe requests sent (R)"),
        ("bytes_per_token", "deferred", None, "not run: 0 probe requests sent (R)"),
    ]


@pytest.mark.parametrize(("flush_max", "points"), [(0, 0), (1, 2), (2, 3), (16, 6), (17, 7), (32, 7)])
def test_most_eviction_points_of_a_bisection(flush_max, points):
    from kvreplay.experiments.probe.cut import eviction_points_max

    # k = 0, flush_max, then halvings of [0, flush_max] until hi - lo = 1: ceil(log2(flush_max)) of them
    assert eviction_points_max(flush_max) == points
