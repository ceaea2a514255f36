"""kvreplay against a real llama.cpp ``llama-server`` (native CPU build, tiny GGUF model).

The same scaled-down workload as the vLLM test (12 bodies sharing a system block)
is primed forward, then replayed in reverse, at C1 with 4 slots. llama.cpp keeps
its prompt cache per slot, so the expected values are computed here from the
server's own ``/apply-template`` + ``/tokenize``: at C1 one slot stays warm and
each request reuses its common prefix with the previous request's prompt.
``usage...cached_tokens`` must equal ``timings.cache_n``, and the per-request
deltas of ``llamacpp:prompt_tokens_cached_total`` must equal it too.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from integration.real.realsrv_helpers import (
    CONV_REPLY_TOKENS,
    SYNTH_ISL,
    SYNTH_PREFIX,
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

from kvreplay import testing as kt
from kvreplay.evidence.engine import phase_evidence
from kvreplay.report.diagnose import CACHE_RULES, diagnose
from kvreplay.rundir import load_run

pytestmark = [pytest.mark.real_server, pytest.mark.timeout(900)]


def prompt_tokens(url: str, body: dict) -> list[int]:
    prompt = post_json(url, "/apply-template", {"messages": body["messages"]})["prompt"]
    return post_json(
        url, "/tokenize", {"content": prompt, "add_special": True, "parse_special": True}
    )["tokens"]


def test_snapshot_identity(llama_server, tiny_gguf_model):
    proc = kvreplay("snapshot", "--target", llama_server.url, "--backend", "llamacpp", timeout_s=60)
    assert proc.returncode == 0, proc.stderr
    snap = json.loads(proc.stdout)
    assert snap["backend"] == "llamacpp"
    ident = snap["identity"]
    assert ident["model_path"] == str(tiny_gguf_model)
    assert "tiny" in ident["models"]
    assert ident["total_slots"] == 4
    # The build the server reports is the one the binary says it is.
    ver = subprocess.run(
        [str(kt.llama_server_binary()), "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    # "version: 0.5.0-dev (build 1, commit 0c1e570)" -> /props build_info "b1-0c1e570"
    m = re.search(r"build (\d+), commit ([0-9a-f]+)", ver.stdout + ver.stderr)
    assert m, ver.stdout + ver.stderr
    assert ident["build_info"] == f"b{m.group(1)}-{m.group(2)}"
    assert "llamacpp:prompt_tokens_cached_total" in json.dumps(snap["raw"])


def test_prime_forward_replay_reverse_c1(llama_server, tiny_workload, tmp_path):
    url = llama_server.url
    bodies = [json.loads(p.read_bytes()) for p in sorted(tiny_workload.glob("*.json"))]
    assert len(bodies) == 12
    tokens = [prompt_tokens(url, b) for b in bodies]
    shared = min(lcp(tokens[0], t) for t in tokens[1:])
    assert shared >= 256, f"shared prefix is only {shared} tokens"
    assert max(len(t) for t in tokens) < 4096 - 16

    before = scrape(url)
    out = tmp_path / "run"
    proc = kvreplay(
        "run",
        str(tiny_workload),
        "--target",
        url,
        "--backend",
        "llamacpp",
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
    assert json.loads((out / "summary.json").read_text())

    prime = sorted((r for r in records if r["phase"] == "prime"), key=lambda r: r["position"])
    replay = sorted((r for r in records if r["phase"] == "replay"), key=lambda r: r["position"])
    assert [r["body_index"] for r in prime] == list(range(12))
    assert [r["body_index"] for r in replay] == list(range(11, -1, -1))
    for r in prime + replay:
        t = tokens[r["body_index"]]
        assert r["status"] == "ok", r
        assert r["http_status"] == 200
        assert r["finish_reason"] in ("length", "stop")
        timings = r["timings"]
        assert isinstance(timings, dict), r
        cached = r["usage"]["cached_tokens"]
        assert r["usage"]["prompt_tokens"] == len(t)
        assert cached == timings["cache_n"], (r["phase"], r["position"], r["usage"], timings)
        assert timings["cache_n"] + timings["prompt_n"] == len(t)

    assert prime[0]["usage"]["cached_tokens"] == 0
    # At C1 every request picks the slot whose cached prompt is most similar, so one
    # slot stays warm and holds the previous request's prompt: a request reuses
    # exactly its common prefix with that prompt (at most its own length minus one,
    # llama.cpp re-evaluates the last token). Replaying the last primed body first
    # therefore reuses all of it; every other body reuses the shared prefix.
    order = prime + replay
    for prev, r in zip(order, order[1:], strict=False):
        t = tokens[r["body_index"]]
        expected = min(lcp(t, tokens[prev["body_index"]]), len(t) - 1)
        assert expected >= shared
        assert r["usage"]["cached_tokens"] == expected, (r["phase"], r["position"], r["usage"])
    assert replay[0]["usage"]["cached_tokens"] == len(tokens[11]) - 1

    # Per-request counter deltas at C1 (common names: hit_tokens, computed_tokens).
    for r in prime + replay:
        delta = r["counter_delta"]
        assert delta is not None and not delta.get("reset"), (r, proc.stderr[-2000:])
        assert delta["hit_tokens"] == r["usage"]["cached_tokens"], (
            r["phase"],
            r["position"],
            delta,
        )
        assert delta["computed_tokens"] == r["timings"]["prompt_n"], (
            r["phase"],
            r["position"],
            delta,
        )

    # And over the whole run, from our own scrape of the native series.
    cached_total = series(after, "llamacpp:prompt_tokens_cached_total") - series(
        before, "llamacpp:prompt_tokens_cached_total"
    )
    assert cached_total == sum(r["usage"]["cached_tokens"] for r in records)
    computed_total = series(after, "llamacpp:prompt_tokens_total") - series(
        before, "llamacpp:prompt_tokens_total"
    )
    assert computed_total == sum(r["timings"]["prompt_n"] for r in records)

    # Diagnosis (issue 16): llama.cpp has no lookup counter; its cached-tokens counter is
    # live because it did prompt work (computed_tokens moved), and the reverse replay
    # restored on it. The exact set of cache findings is empty.
    summary = json.loads((out / "summary.json").read_text())
    ph = {p["name"]: p for p in summary["phases"]}
    ev = phase_evidence(ph["replay"])
    replay_cached = sum(r["usage"]["cached_tokens"] for r in replay)
    assert [(t.tier, t.key, t.value) for t in ev.tiers][0] == ("device", "hit_tokens", replay_cached)
    assert ev.tiers[0].basis[0][0] == "computed_tokens"
    run = load_run(out)
    found = [f.rule for f in diagnose(run.summary, run.plan, run.record_list)]
    assert {f for f in found if f in CACHE_RULES} == set(), found
    assert (out / "counters.jsonl").exists()


def test_kv_probe(llama_server, tmp_path):
    """Cold legs fit a positive prefill rate (from timings.prompt_ms); warm legs reuse
    the shared prefix (token-granular here); the eviction legs report a bracket."""
    url = llama_server.url
    proc, verdict, legs, bodies = kvreplay_probe(
        tmp_path / "probe",
        *("--target", url, "--backend", "llamacpp", "--sizes", "512,1024,2048,3072"),
        *("--cold-repeats", "2", "--flush-prefix", "1024", "--foreign-tokens", "256"),
        *("--flush-max", "4", "--flush-repeats", "1", "--fit-on", "server", "--quiet"),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert verdict["prefill_fit"]["rate_tokens_per_s"] > 0, verdict["prefill_fits"]

    cold = [leg for leg in legs if leg["leg"] == "A"]
    warm = [leg for leg in legs if leg["leg"] == "B"]
    assert len(cold) == 8 and len(warm) == 4
    for b in warm:
        a = [leg for leg in cold if leg["size_tokens"] == b["size_tokens"]][-1]
        ta = prompt_tokens(url, bodies[a["body_sha256"]])
        tb = prompt_tokens(url, bodies[b["body_sha256"]])
        shared = lcp(ta, tb)
        assert b["prompt_tokens"] == len(tb)
        assert b["cached_tokens"] == min(shared, len(tb) - 1), (b["size_tokens"], shared, b)

    assert verdict["flush_prefix_cached_tokens"] > 0  # k = 0: the prefix is reusable
    lo, hi = verdict["flush_bracket"]
    if verdict["min_flush_k"] is None:
        assert (lo, hi) == (4, None), verdict["flush_bracket"]
        assert "did not flush" in verdict["eviction_note"]
    else:
        assert hi - lo == 1 and verdict["min_flush_k"] == hi


def test_conversation_live_vs_captured(llama_server, tmp_path):
    """Issue 34: one session of 3 turns, replayed with captured and with live history.

    Every reply is 160 copies of one token (logit_bias, greedy), so after turn k the slot
    holds T_k + 159 reply tokens (the last sampled token is never decoded). At C1 turn k+1
    picks that slot (its prompt shares over 10% with it) and reuses, token by token, its
    common prefix with it: with the captured history exactly T_k (the user's turn
    boundary, the generation prompt included), with live history T_k + 159. All slots are
    erased before each run (a slot's leftover would share the template's first tokens
    with turn 0), and the two runs' bodies differ only in the system message's first letter
    ("A", "B"), so no cached prompt in host RAM is similar enough to be loaded: turn 0
    reuses nothing.
    """
    url = llama_server.url

    def tokens(msgs):
        return prompt_tokens(url, {"messages": msgs})

    t = conversation_reply_token(tokens)
    cached, expected = {}, {}
    for history, marker in (("captured", "A"), ("live", "B")):
        for slot in range(4):
            post_json(url, f"/slots/{slot}?action=erase", {})
        bodies = conversation_bodies(marker, t)
        recs = run_conversation(tmp_path / history, bodies, url, "llamacpp", history)
        sent = sent_conversation(bodies, recs, history, tokens)
        for k, r in enumerate(recs):
            assert r["usage"]["cached_tokens"] == r["timings"]["cache_n"], (history, k, r["timings"])
        cached[history] = [r["usage"]["cached_tokens"] for r in recs]
        expected[history] = [0] + [
            min(lcp(sent[k], computed_after(sent[k - 1], t)), len(sent[k]) - 1) for k in range(1, len(sent))
        ]
        boundary = [len(sent[k - 1]) for k in range(1, len(sent))]  # where turn k-1's prompt ended
        if history == "captured":
            assert expected[history][1:] == boundary, (expected[history], boundary)
        else:
            assert expected[history][1:] == [b + CONV_REPLY_TOKENS - 1 for b in boundary]
        assert cached[history] == expected[history], (history, cached[history], expected[history])
    assert cached["live"] == sorted(set(cached["live"])), cached  # grows with the turn
    diff = [a - b for a, b in zip(cached["live"], cached["captured"], strict=True)]
    assert diff == [a - b for a, b in zip(expected["live"], expected["captured"], strict=True)]
    assert all(d >= CONV_REPLY_TOKENS - 1 for d in diff[1:]), diff


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_synth_exact_lengths_and_slot_reuse(llama_server, tmp_path, api):
    """Issue 46: ``kvreplay synth --tokenizer <llama-server> --check`` (6 bodies of 400 prompt and 4
    output tokens, 2 groups of a 300-token prefix, dealt in turn), replayed once at C1 by the check.

    The server's /tokenize of the bytes sent (chat: its /apply-template, then /tokenize with special
    tokens) gives 400 tokens for every prompt, and its usage says 400/4 (``ignore_eos``: llama-server
    has no ``min_tokens``, so synth leaves it out). The slots are erased first. llama.cpp reuses its
    common prefix with the prompt a slot holds, token by token, capped at the prompt minus one: a
    request picks the slot holding over 10% of its prompt (its group's previous body: 300 of 400
    tokens, a match that keeps over half of that slot, so the slot is kept as it is), or else the
    least recently used one, empty here, where only a host-cache prompt matching at least a quarter of
    itself would be loaded (the other group's share only the head): a leader reuses 0, every later
    member exactly its group's 300 tokens. Per group: 0 + 300 + 300 = 600 cached tokens.
    """
    url = llama_server.url
    for slot in range(4):
        post_json(url, f"/slots/{slot}?action=erase", {})
    bodies, manifest, recs, printed = synth_check(tmp_path, url, api, seed=46 if api == "completions" else 47)
    assert manifest["tokenizer"]["dialect"] == "llama" and manifest["model"] == "tiny"
    assert all("min_tokens" not in b for b in bodies)

    def tokens(body: dict) -> list[int]:
        if api == "chat":
            return prompt_tokens(url, body)
        return post_json(url, "/tokenize", {"content": body["prompt"], "add_special": True})["tokens"]

    toks = [tokens(b) for b in bodies]
    assert_synth_design(bodies, manifest, recs, toks, api)
    # the common prefix with the previous body of the same group (its slot), capped at the prompt minus one
    expected = [min(lcp(t, toks[i - 2]), len(t) - 1) if i >= 2 else 0 for i, t in enumerate(toks)]
    assert expected == [0, 0] + [SYNTH_PREFIX] * 4
    cached = [r["usage"]["cached_tokens"] for r in recs]
    assert cached == expected, (api, cached)
    for r in recs:
        assert r["timings"]["cache_n"] == r["usage"]["cached_tokens"], r["timings"]
        assert r["timings"]["cache_n"] + r["timings"]["prompt_n"] == SYNTH_ISL, r["timings"]
        assert r["counter_delta"]["hit_tokens"] == r["usage"]["cached_tokens"], r["counter_delta"]
    lines = synth_check_lines(manifest, cached)
    assert [x.split()[-1] for x in lines] == ["600", "600"]
    for line in [*lines, "  every body's usage equals its designed prompt and output tokens"]:
        assert line + "\n" in printed, (line, printed)
    assert "the cache was warm" not in printed
