"""kvreplay probe against the embedded simulator: fit, Cmax and eviction bisection.

Expected values are derived from the simulator's documented model, not from the
probe's code:

- entries model, N snapshots, strict LRU, ``s`` snapshots stored per missed
  request. The prefix P is stored by W1 (a miss: s entries), each foreign
  request (each its own system block, so a miss) stores s more. P's system
  snapshot is the least recently used of those, so it is evicted as soon as
  ``s * (k + 1) > N``; the smallest such k is ``floor(N / s)``:
  N=8, s=2 -> 4; N=8, s=1 -> 8; N=6, s=2 -> 3; N=10, s=2 -> 5.
- prefill is ``a + uncached / rate`` model seconds, slept times ``time_scale``,
  so the wall-clock fit must give ``a * time_scale`` and ``rate / time_scale``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from kvreplay.backends import make_backend
from kvreplay.cli import main
from kvreplay.experiments.probe.legs import ProbeConfig, run_probe
from kvreplay.sim import SimConfig, SimServer

ROOT = Path(__file__).resolve().parents[2]


def probe(sim_cfg: SimConfig, cfg: ProbeConfig):
    async def go():
        srv = SimServer(sim_cfg)
        await srv.start()
        try:
            async with aiohttp.ClientSession() as session:
                backend = make_backend("halogen", srv.base_url, session)
                verdict = await run_probe(session, srv.base_url, backend, cfg)
            return verdict, list(srv.engine.events)
        finally:
            await srv.stop()

    return asyncio.run(go())


EVICT = dict(
    sizes=(512, 1024), flush_prefix_tokens=1024, foreign_tokens=128, flush_max=16, flush_repeats=2
)


@pytest.mark.parametrize(
    ("entries", "snapshots", "k_min"), [(8, 2, 4), (8, 1, 8), (6, 2, 3), (10, 2, 5)]
)
def test_bisection_finds_the_smallest_flushing_k(entries, snapshots, k_min):
    v, events = probe(
        SimConfig(time_scale=0, cache_entries=entries, snapshots=snapshots), ProbeConfig(**EVICT)
    )
    assert v["min_flush_k"] == k_min
    assert v["flush_bracket"] == [k_min - 1, k_min]
    by_k: dict[int, list[dict]] = {}
    for pt in v["points"]:
        by_k.setdefault(pt["k"], []).append(pt)
    assert by_k[k_min - 1][0]["cached_second"] > 0 and all(
        not p["flushed"] for p in by_k[k_min - 1]
    )
    assert all(p["cached_second"] == 0 and p["flushed"] for p in by_k[k_min])
    assert all(len(pts) == 2 for pts in by_k.values())  # every point repeated
    # every repeat used fresh system bytes: W1 of every point was a miss
    assert all(p["cached_first"] == 0 for p in v["points"])
    assert v["entries_per_request"] == snapshots
    lo, hi = v["implied_entries"]
    assert lo <= entries <= hi
    assert v["bytes_per_token"] == 147456.0  # the simulator's default KV bytes per token
    # every generation request the simulator saw is one the probe counted
    chats = [e for e in events if e["kind"] == "request"]
    assert len(chats) == v["requests"]
    assert v["unplanned_requests"] and all(
        c["endpoint"] == "/tokenize" for c in v["unplanned_requests"]
    )


def test_fit_matches_the_configured_prefill_cost():
    scale = 0.2
    v, _ = probe(
        SimConfig(time_scale=scale, cache_entries=8),
        ProbeConfig(sizes=(1024, 2048, 4096, 8192), flush_max=0, fit_on="stream"),
    )
    fit = v["prefill_fit"]
    assert fit["source"] == "stream"
    assert fit["a_s"] == pytest.approx(1.52 * scale, rel=0.05)
    assert fit["rate_tokens_per_s"] == pytest.approx(1370 / scale, rel=0.05)
    assert fit["r2"] > 0.999
    assert len(v["prefill_fits"]["stream"]["residuals_s"]) == 4
    # warm legs reuse the cold leg's system snapshot and are cheaper
    for w in v["warm"]:
        assert w["cached_tokens"] > 0.95 * w["size_tokens"]
        assert w["saving_per_reuse_s"] > 0


def test_cmax_is_the_cached_tokens_of_the_64k_warm_leg():
    v, events = probe(
        SimConfig(time_scale=0, cache_entries=8), ProbeConfig(sizes=(8192, 65536), flush_max=0)
    )
    warm64 = [w for w in v["warm"] if w["size_tokens"] == 65536][0]
    assert warm64["prompt_tokens"] == 65536  # sized exactly through /tokenize
    reqs = [e for e in events if e["kind"] == "request"]
    sim_cached = reqs[-1]["cached_tokens"]  # the last request is the 64k warm leg
    assert reqs[-1]["prompt_tokens"] == 65536
    assert sim_cached == reqs[-1]["system_end"]  # a hit on the system snapshot
    assert v["cmax_tokens"] == sim_cached == warm64["cached_tokens"]


def test_probe_command_writes_verdict_and_report(tmp_path):
    out = tmp_path / "p"
    rc = main(
        [
            "probe",
            "--target",
            "sim",
            "--sim-time-scale",
            "0",
            "--sizes",
            "512,1024",
            "--flush-prefix",
            "1024",
            "--foreign-tokens",
            "128",
            "--flush-max",
            "8",
            "--flush-repeats",
            "1",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    v = json.loads((out / "verdict.json").read_text())
    for key in (
        "prefill_fit",
        "cmax_tokens",
        "min_flush_k",
        "flush_bracket",
        "points",
        "bytes_per_token",
    ):
        assert key in v
    assert set(v["prefill_fit"]) >= {"a_s", "rate_tokens_per_s", "r2"}
    assert v["min_flush_k"] == 4
    report = (out / "report.md").read_text()
    assert "about 4 foreign requests evict a 1k prefix" in report
    assert report.startswith("# kvreplay probe")
    lines = (out / "requests.jsonl").read_text().splitlines()
    assert len(lines) == v["requests"]


class _NoTokenize(SimServer):
    """The simulator without /tokenize: the probe must size prompts from usage.prompt_tokens."""

    def make_app(self):
        app = super().make_app()
        return _without(app, "/tokenize")


def _without(app, path):
    from aiohttp import web

    new = web.Application(client_max_size=app._client_max_size)
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        if info.get("path") != path:
            new.router.add_route(route.method, info["path"], route.handler)
    return new


def test_usage_calibration_without_tokenize_and_without_counters():
    async def go():
        srv = _NoTokenize(SimConfig(time_scale=0, cache_entries=8))
        await srv.start()
        try:
            async with aiohttp.ClientSession() as session:
                cfg = ProbeConfig(**EVICT)
                verdict = await run_probe(session, srv.base_url, None, cfg)
            return verdict, list(srv.engine.events)
        finally:
            await srv.stop()

    v, events = asyncio.run(go())
    assert v["token_counting"]["mode"] == "usage"
    calib = v["unplanned_requests"]
    assert [c["endpoint"] for c in calib] == [
        "/tokenize",
        "/tokenize",
        "/v1/chat/completions",
        "/v1/chat/completions",
    ]
    chats = [e for e in events if e["kind"] == "request"]
    assert (
        len(chats) == v["requests"] + 2
    )  # the two calibration requests are the only unplanned ones
    assert v["min_flush_k"] == 4  # learnt from usage.cached_tokens alone
    assert v["bytes_per_token"] is None and v["implied_entries"] is None
    # sized from two calibration counts (c0 + c1 * words), corrected by each leg's
    # usage: the first leg is off only by its system head's tokens, the next exact
    # (the probe records what it achieved either way)
    cold = [r for r in v["warm"]]
    assert abs(cold[0]["prompt_tokens"] - 512) <= 4
    assert cold[1]["prompt_tokens"] == 1024


def test_console_line_prints_the_fastest_cold_repeat_as_the_fit_uses():
    said, legs = [], []

    async def go():
        srv = SimServer(SimConfig(time_scale=0.05, cache_entries=8))
        await srv.start()
        try:
            async with aiohttp.ClientSession() as session:
                backend = make_backend("halogen", srv.base_url, session)
                return await run_probe(
                    session, srv.base_url, backend,
                    ProbeConfig(sizes=(512, 2048), flush_max=0, cold_repeats=3),
                    log=legs.append, progress=said.append,
                )
        finally:
            await srv.stop()

    v = asyncio.run(go())
    for size in (512, 2048):
        cold = [r["ttft_s"] for r in legs if r.get("leg") == "A" and r.get("size_tokens") == size]
        assert len(cold) == 3
        (line,) = [s for s in said if s.startswith(f"size {size}:")]
        assert line.startswith(f"size {size}: cold ttft {min(cold):.3f} s (fastest of 3), ")
        (w,) = [w for w in v["warm"] if w["size_tokens"] == size]
        assert w["cold_ttft_s"] == round(min(cold), 6)
    assert "prefill_fit_warning" in v


# ---- issue 18: a halogen-like entry cap (truncating) -------------------------------
# cap 116389652 B at 2674 B/token holds 116389652 // 2674 = 43526 tokens. The 64k cold
# leg's two snapshots both truncate to that one 43526-token prefix; its warm leg hits
# 43526 (Cmax, cap-bound). Every other leg is under the cap: entry bytes = L x 2674,
# so the slope over them is exactly 2674.
CAP = dict(cache_entries=8, snapshots=2, bytes_per_token=2674, max_entry_bytes=116389652)
CAP_PROBE = dict(sizes=(16384, 32768, 65536), flush_prefix_tokens=8192, foreign_tokens=1024)


def test_done_when_probe_cmax_is_the_truncated_entry():
    v, _ = probe(SimConfig(time_scale=0, **CAP), ProbeConfig(**CAP_PROBE))
    assert v["cmax_tokens"] == 43526
    assert v["cmax_cap_bound"] is True
    assert v["bytes_per_token"] == 2674.0
    assert "below the entry cap" in v["bytes_per_token_method"]
    assert v["refused_stores"] == 0
    assert v["entry_cap_bytes"] == v["max_entry_bytes_seen"] == 43526 * 2674
    assert [w["cached_tokens"] for w in v["warm"]][-1] == 43526


def test_refusing_server_caches_nothing_on_the_64k_leg_and_counts_refusals():
    v, _ = probe(SimConfig(time_scale=0, refuse_over_bytes=True, **CAP), ProbeConfig(**CAP_PROBE))
    warm = {w["size_tokens"]: w["cached_tokens"] for w in v["warm"]}
    assert warm[65536] == 0
    assert v["cmax_tokens"] == warm[32768] == 32742  # the 32k leg is the largest held
    # the 64k cold leg offers two over-cap snapshots (system, messages): both refused, and
    # its warm leg offers one more over-cap messages snapshot (its system one is refused too)
    assert v["refused_stores"] == 4
    assert v["cmax_cap_bound"] is False


def test_cli_target_prefix_statement(tmp_path, capsys):
    args = ["probe", "--target", "sim", "--sim-time-scale", "0", "--sim-cache-entries", "8"]
    args += ["--sim-bytes-per-token", "2674", "--sim-max-entry-bytes", "116389652"]
    args += ["--sizes", "16k,32k,64k", "--flush-max", "0", "--target-prefix", "24k"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "Cmax 43526 tokens covers the 24576-token prefix" in out
    v = json.loads((tmp_path / "a" / "verdict.json").read_text())
    assert v["target_prefix"]["covered"] is True
    assert v["target_prefix"]["entry_bytes_needed"] == 24576 * 2674
    report = (tmp_path / "a" / "report.md").read_text()
    assert "cap-bound" in report and "refused stores: 0" in report
    assert main([*args[:-1], "48k", "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "Cmax 43526 tokens does not cover the 49152-token prefix: the entry cap is the wall" in out


def probe_until(sim_cfg: SimConfig, cfg: ProbeConfig, legs: int):
    """run_probe whose stop_new answers True once ``legs`` leg records were logged."""
    logged: list[dict] = []

    async def go():
        srv = SimServer(sim_cfg)
        await srv.start()
        try:
            async with aiohttp.ClientSession() as session:
                backend = make_backend("halogen", srv.base_url, session)
                verdict = await run_probe(session, srv.base_url, backend, cfg, log=logged.append,
                                          stop_new=lambda: len(logged) >= legs)
            return verdict, list(srv.engine.events), logged
        finally:
            await srv.stop()

    return asyncio.run(go())


def test_stop_new_cuts_the_bisection_between_points():
    # N = 8 entries, s = 2: k = 0 keeps the prefix. Legs: A 512, B 512, A 1024, B 1024, then the
    # point k = 0 (C-first, C-second; one repeat) = 6; stop_new is true from then on, so the point
    # k = 4 (its C-first, 4 foreign, C-second) never starts and no k is found.
    cfg = ProbeConfig(sizes=(512, 1024), flush_prefix_tokens=1024, foreign_tokens=128, flush_max=4,
                      flush_repeats=1)
    v, events, logged = probe_until(SimConfig(time_scale=0, cache_entries=8, snapshots=2), cfg, 6)
    assert [r["leg"] for r in logged] == ["A", "B", "A", "B", "C-first", "C-second"]
    assert v["stopped"] == {"reason": "stop_new_after", "requests": 6, "cold": [2, 2], "warm": [2, 2],
                            "eviction_points": [1, 4]}  # k = 0, 4, 2, 1 at most
    assert [(p["k"], p["flushed"]) for p in v["points"]] == [(0, False)]
    assert v["min_flush_k"] is None and v["flush_bracket"] == [None, None]
    assert v["eviction_note"] == "cut at stop_new_after after 1 eviction point(s): no minimum flushing k"
    assert len([e for e in events if e["kind"] == "request"]) == 6  # nothing sent after the cut
    assert v["prefill_fit"] is not None  # both cold sizes answered before the cut


def test_stop_new_before_the_first_leg_sends_nothing():
    cfg = ProbeConfig(sizes=(512, 1024), flush_max=4, flush_prefix_tokens=1024, foreign_tokens=128)
    v, events, logged = probe_until(SimConfig(time_scale=0, cache_entries=8), cfg, 0)
    assert logged == [] and [e for e in events if e["kind"] == "request"] == []
    assert v["unplanned_requests"] == []  # not even the token-count calibration
    assert v["stopped"] == {"reason": "stop_new_after", "requests": 0, "cold": [0, 2], "warm": [0, 2],
                            "eviction_points": [0, 4]}
    assert (v["prefill_fit"], v["cmax_tokens"], v["min_flush_k"], v["points"]) == (None, None, None, [])


def test_entries_per_request_counts_only_legs_below_the_cap_and_sizes_simulate(tmp_path, capsys):
    """Issue 29's first "Done when" (time scale 0.01: the fit needs time; nothing here depends on it).

    The 16k cold leg stores 2 (system and messages snapshots); the 64k one stores 1 (both
    cut to the cap coincide), so a median over both said 1. Below the cap: 2; each eviction
    point's foreign block stored 2 per foreign request: they agree, s = 2. min_flush_k = 4
    (8 entries, s = 2: floor(8 / 2)), so 8-9 entries are implied. simulate then sizes the
    bundled workload's burst of 9: 2 x (9 + 1) = 20 entries at the entry cap the probe saw
    (the largest entry on the capped leg: 43,526 tokens x 2,674 B - the template tokens
    the snapshot leaves out; 20 x that = 2.168 GiB).
    """
    import runpy

    args = ["probe", "--target", "sim", "--sim-cache", "entries", "--sim-cache-entries", "8"]
    args += ["--sim-snapshots", "2", "--sim-bytes-per-token", "2674"]
    args += ["--sim-max-entry-bytes", "116389652", "--sim-time-scale", "0.01", "--sizes", "16k,64k"]
    args += ["--flush-max", "6", "--fit-on", "stream", "--out", str(tmp_path / "P")]
    assert main(args) == 0
    capsys.readouterr()
    v = json.loads((tmp_path / "P" / "verdict.json").read_text())
    assert v["entries_per_request"] == 2
    assert v["min_flush_k"] == 4 and v["implied_entries"] == [8, 9]
    e = v["entries_per_request_evidence"]
    assert (e["from_cold_legs"], e["cold_legs"], e["cold_legs_on_cap"]) == (2.0, 1, 1)
    assert e["from_eviction_points"] == 2.0 and e["agree"] is True
    assert v["evidence"]["entries_per_request"] == e["evidence"]
    assert "below the entry cap" in e["evidence"] and "agree" in e["evidence"]
    assert "8-9 entries" in v["plain"]
    # two sizes: a line through two points, no stated accuracy (issue 29 item 4)
    assert v["prefill_fits"]["stream"]["ci95"] is None
    assert v["prefill_fit_accuracy_warning"].startswith("2 sizes fit a line exactly")
    cap = v["entry_cap_bytes"]
    assert 116389652 - 2674 * 10 < cap <= 116389652  # a capped entry: the cap less a few tokens
    d = tmp_path / "D"
    runpy.run_path(str(ROOT / "fixtures" / "workloads" / "build_sizing.py"))["main"](d)
    sim = ["simulate", str(d / "issues.jsonl"), "--interleave", str(d / "foreign.jsonl")]
    sim += ["--every", "1", "--share", "1", "--burst", "9", "--prefill", "a=1.52,rate=1370"]
    assert main([*sim, "--sim-from-verdict", str(tmp_path / "P" / "verdict.json"), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["calibration"]["capacity"] == 8  # today: s x min_flush_k
    assert rep["recommended"]["capacity"] == 20
    assert rep["recommended"]["memory_gib"] == 20 * cap / 2**30
    assert f"{rep['recommended']['memory_gib']:.3f}" == "2.168"


@pytest.mark.parametrize(("entries", "min_k", "bracket"), [(8, 4, [7, 8]), (12, 6, [11, 12])])
def test_every_leg_on_the_cap_gives_the_caps_bytes_per_token_and_exact_entries(tmp_path, capsys, entries, min_k,
                                                                               bracket):
    """Issue 42 item 7: sizes 64k and 96k and a 64k flush prefix, every one over the cap.

    Cap 116389652 // 2674 = 43,526 tokens: every reuse (the 64k and 96k warm legs, the k = 0
    point) caches 43,526 tokens, so no reuse shows the tail and the plateau (two prefix
    lengths, one cached count) is the cap. No leg is below it: bytes per token is the cap's
    figure, the stored entry 43,526 x 2,674 = 116,388,524 bytes over 43,526 tokens = 2,674.0
    (not 1,775.9, the entry over the 65,536-token leg). The capped prefix is one entry:
    flushed iff 1 + 2k > N, so N = 8 gives k = 4 (bracket 7..8), N = 12 gives k = 6
    (11..12). The calibrated simulator takes N exactly: the entries gauge (full) inside the
    bracket; without a gauge, 2 x k, the top of a capped bracket, as its note says.
    """
    args = ["probe", "--target", "sim", "--sim-cache", "entries", "--sim-cache-entries", str(entries)]
    args += ["--sim-snapshots", "2", "--sim-bytes-per-token", "2674", "--sim-max-entry-bytes", "116389652"]
    args += ["--sim-time-scale", "0", "--sizes", "64k,96k", "--flush-max", "16", "--quiet"]
    args += ["--flush-prefix", "64k", "--out", str(tmp_path / "p")]
    assert main(args) == 0
    capsys.readouterr()
    path = tmp_path / "p" / "verdict.json"
    v = json.loads(path.read_text())
    assert v["bytes_per_token"] == 2674.0
    assert v["bytes_per_token_method"].startswith("the entry cap's figure: every one of ")
    assert v["entry_cap_bytes"] == 116388524 and v["cap_tokens_from_reuse"] == 43526
    assert (v["flush_prefix_capped"], v["flush_prefix_effective_tokens"]) == (True, 43526)
    assert v["prefix_bytes"] == 116388524
    assert v["entries_per_request"] == 2 and v["min_flush_k"] == min_k and v["implied_entries"] == bracket
    from kvreplay.sim.calibrate import calibrate_from_verdict

    cal = calibrate_from_verdict(path)
    assert cal.capacity == entries and cal.changes["cache_entries"] == entries
    assert f"capacity: {entries} entries (the entries gauge, full; inside {bracket[0]}..{bracket[1]}" in "".join(
        cal.notes)
    del v["max_entries_gauge_seen"]
    (tmp_path / "nogauge.json").write_text(json.dumps(v))
    cal = calibrate_from_verdict(tmp_path / "nogauge.json")
    assert cal.capacity == entries
    assert (f"capacity: {entries} entries (2 per request x min_flush_k {min_k}; the eviction prefix is over the"
            f" entry cap, so it is one entry; the bracket is {bracket[0]}..{bracket[1]})") in cal.notes


@pytest.mark.parametrize(
    ("flush", "capped", "kept", "implied"),
    [("8k", False, 8192, [8, 9]), ("24k", False, 24576, [8, 9]),
     ("43k", True, 43526, [7, 8]), ("64k", True, 43526, [7, 8])],
)
def test_cap_diagnosis_is_the_same_for_any_flush_prefix(tmp_path, capsys, flush, capped, kept, implied):
    """Issue 29 item 3: a flush prefix over the cap no longer bends the bytes-per-token slope.

    Cap 116389652 // 2674 = 43,526 tokens. 43k (44,032 tokens) and 64k flush prefixes are
    over it: their reuses cache 43,526 tokens, far more than the 26-token tail short of the
    prefix, so every leg longer than 43,526 + 26 tokens is left out of the slope (2,674 B
    per token, not 2,618), Cmax 43,526 is cap-bound, and a 44,000-token prefix would need
    44,000 x 2,674 = 117,656,000 bytes (112.2 MiB) over the cap. An eviction prefix over
    the cap is one entry: flushed iff 1 + 2k > N, so k = 4 implies N in 7..8; under the
    cap flushed iff 2(k + 1) > N: N in 8..9. The cache has N = 8.
    """
    args = ["probe", "--target", "sim", "--sim-cache", "entries", "--sim-cache-entries", "8"]
    args += ["--sim-snapshots", "2", "--sim-bytes-per-token", "2674", "--sim-max-entry-bytes", "116389652"]
    args += ["--sim-time-scale", "0", "--sizes", "16k,32k,64k", "--flush-max", "6", "--quiet"]
    args += ["--flush-prefix", flush, "--target-prefix", "44000", "--out", str(tmp_path / "p")]
    assert main(args) == 0
    capsys.readouterr()
    v = json.loads((tmp_path / "p" / "verdict.json").read_text())
    assert v["bytes_per_token"] == 2674.0
    assert v["cmax_tokens"] == 43526 and v["cmax_cap_bound"] is True
    assert v["cap_tokens_from_reuse"] == 43526
    assert v["target_prefix"]["entry_bytes_needed"] == 117656000
    assert v["target_prefix"]["sentence"].startswith(
        "Cmax 43526 tokens does not cover the 44000-token prefix: the entry cap is the wall;"
        " an entry would need 117656000 bytes (112.2 MiB)"
    )
    assert v["entries_per_request"] == 2 and v["min_flush_k"] == 4
    assert v["implied_entries"] == implied
    assert (v["flush_prefix_capped"], v["flush_prefix_effective_tokens"]) == (capped, kept)
    assert v["prefix_bytes"] == round(kept * 2674)
    assert ("over the entry cap: 43526 tokens kept" in v["plain"]) is capped
