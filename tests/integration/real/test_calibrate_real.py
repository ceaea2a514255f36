"""Calibrate the simulator from a real vLLM server and replay one workload against both.

Issue 18, item 5: ``kvreplay probe`` measures the vLLM CPU server (tiny random-weight
model); ``--sim-from-verdict`` turns the verdict into simulator settings (prefill fit,
restore cost, block size, capacity or "unbounded", bytes per token); one workload is
replayed at C1 against the server and against the calibrated simulator, and every
request must show the same hit/miss pattern with cached tokens within one block.

The workload is built from words that both tokenizers count as one token (checked
here with vLLM's own ``/tokenize`` and the simulator's ``count_tokens``), so the two
prompts of a body differ only by the chat template's few tokens: a shared prefix of
several blocks is a hit on both, and the block-floored cached counts differ by at
most one block. Order (S = a system block of 400 words, ~3 blocks of 128; u = a
20-word user turn):

    S1 u1, S1 u2, S2 u3, S1 u4, S2 u5, S3 u6, S1 u1 (exact repeat), S3 u7
    miss,  hit,   miss,  hit,   hit,   miss,  hit,                  hit

TTFTs of both are printed in the closing note, not asserted.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from integration.real.realsrv_helpers import kvreplay, kvreplay_probe, post_json, read_records, scrape

from kvreplay.sim.calibrate import calibrate_from_verdict
from kvreplay.sim.tokenizer import count_tokens

pytestmark = [pytest.mark.real_server, pytest.mark.timeout(900)]

CANDIDATES = [
    "the", "of", "and", "to", "in", "is", "it", "that", "for", "on", "with", "as", "was", "at", "by", "be", "this",
    "are", "or", "from", "have", "not", "but", "had", "they", "you", "were", "his", "her", "she", "he", "one", "all",
    "we", "can", "there", "their", "when", "been", "has", "more", "if", "will", "would", "who", "so", "no", "what",
    "up", "out", "about", "into", "than", "them", "some", "could", "time", "other", "only", "new", "these", "two",
    "may", "first", "then", "do", "any", "like", "my", "now", "over", "such", "our", "man", "me", "even", "most",
    "made", "after", "also", "did", "many", "before", "must", "well", "back", "years", "where", "much", "your", "way",
    "down", "should", "because", "each", "just", "those", "people", "how", "too", "little", "state", "good", "very",
    "make", "world", "still", "own", "see", "men", "work", "long", "get", "here", "between", "both", "life", "being",
    "under", "never", "day", "same", "another", "know", "while", "last", "might", "us", "great", "old", "year", "off",
    "come", "since", "against", "go", "came", "right",
]

PATTERN = [(1, 1), (1, 2), (2, 3), (1, 4), (2, 5), (3, 6), (1, 1), (3, 7)]
EXPECT_HIT = [False, True, False, True, True, False, True, True]


def block_size(samples: dict[str, float]) -> int:
    for key in samples:
        if key.startswith("vllm:cache_config_info{"):
            m = re.search(r'[{,]block_size="(\d+)"', key)
            if m:
                return int(m.group(1))
    raise AssertionError("vllm:cache_config_info has no block_size label")


def single_token_words(url: str) -> list[str]:
    base = len(post_json(url, "/tokenize", {"model": "tiny", "prompt": "hello"})["tokens"])
    out = []
    for w in CANDIDATES:
        n = len(post_json(url, "/tokenize", {"model": "tiny", "prompt": "hello " + w})["tokens"])
        if n - base == 1 and count_tokens(" " + w) == 1:
            out.append(w)
    return out


def test_calibrated_sim_matches_vllm(vllm_server, tmp_path):
    url = vllm_server.url
    blk = block_size(scrape(url))
    words = single_token_words(url)
    assert len(words) >= 40, f"only {len(words)} single-token words: {words}"

    # 1. probe the server and calibrate from its verdict
    proc, verdict, _legs, _bodies = kvreplay_probe(
        tmp_path / "probe",
        *("--target", url, "--backend", "vllm", "--sizes", "512,1024,2048"),
        *("--flush-prefix", "1024", "--foreign-tokens", "256", "--flush-max", "4"),
        *("--flush-repeats", "1", "--quiet"),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    vpath = tmp_path / "probe" / "verdict.json"
    cal = calibrate_from_verdict(vpath)
    assert cal.changes["cache"] == "radix"
    assert cal.changes["block_size"] % blk == 0, (cal.changes, blk)  # gcd of whole-block credits
    assert cal.changes["prefill_tokens_per_s"] > 0

    # 2. the workload
    rng = random.Random(18)
    systems = {i: " ".join(rng.choice(words) for _ in range(400)) for i in (1, 2, 3)}
    users = {i: " ".join(rng.choice(words) for _ in range(20)) for i in range(1, 8)}
    wl = tmp_path / "wl.jsonl"
    with wl.open("w") as f:
        for s, u in PATTERN:
            body = {
                "model": "tiny",
                "max_tokens": 4,
                "messages": [
                    {"role": "system", "content": systems[s]},
                    {"role": "user", "content": users[u]},
                ],
            }
            f.write(json.dumps(body) + "\n")

    # 3. replay against both, C1 forward
    def replay(out, *target):
        p = kvreplay("run", str(wl), *target, "--phase", "p:forward:c1", "--out", str(out))
        assert p.returncode == 0, p.stderr[-4000:]
        recs = sorted(read_records(out), key=lambda r: r["position"])
        assert [r["status"] for r in recs] == ["ok"] * len(PATTERN), recs
        return recs

    real = replay(tmp_path / "real", "--target", url, "--backend", "vllm")
    sim = replay(
        tmp_path / "sim", "--target", "sim", "--sim-from-verdict", str(vpath), "--backend", "vllm"
    )

    rc = [r["usage"]["cached_tokens"] for r in real]
    sc = [r["usage"]["cached_tokens"] for r in sim]
    assert [c > 0 for c in rc] == EXPECT_HIT, rc
    assert [c > 0 for c in sc] == EXPECT_HIT, sc
    sim_blk = cal.changes["block_size"]
    for i, (a, b) in enumerate(zip(rc, sc, strict=True)):
        assert abs(a - b) <= max(blk, sim_blk), (i, rc, sc)

    # closing note: TTFTs, reported only
    print(
        "\ncalibration:", cal.to_json()["notes"],
        "\nTTFT real (s):", [round((r["ttft_ns"] or 0) / 1e9, 4) for r in real],
        "\nTTFT sim  (s):", [round((r["ttft_ns"] or 0) / 1e9, 4) for r in sim],
        "\ncached real:", rc, "\ncached sim: ", sc,
    )
