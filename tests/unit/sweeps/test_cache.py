"""A point's cache state proved, or not, from hand-made summaries and records (kvreplay.sweeps.cache)."""

from kvreplay.sweeps import cache_evidence
from kvreplay.sweeps.cache import NO_RESET, block_size_of


def rec(pos, prompt, cached, phase="c4"):
    return {"phase": phase, "position": pos, "sent": True, "usage": {"prompt_tokens": prompt, "cached_tokens": cached}}


def summary(invalid=(), block=16):
    return {"identity": {"before": {"version": {"cache": {"block_size": block}}}},
            "phases": [{"name": "c4", "invalid_reasons": list(invalid), "tokens": {"prompt": 400, "cached": 100},
                        "counter_delta": {"hits": 3.0, "hit_tokens": 100.0, "running": 0.0}}]}


def test_cold_is_verified_by_the_first_wave_least_cached_request(tmp_path):
    recs = [rec(0, 100, 96), rec(1, 100, 0), rec(2, 100, 96), rec(3, 100, 96), rec(4, 100, 0)]
    c = cache_evidence(tmp_path, summary(), recs, "c4", "cold", wave=4)
    assert (c["verified"], c["reason"]) == (True, None)
    ev = c["evidence"]
    assert ev["first_request"] == {"position": 1, "prompt_tokens": 100, "cached_tokens": 0, "counter_delta": None}
    assert ev["reset"] == "accepted" and ev["cached_share"] == 0.25
    assert ev["counter_delta"] == {"hits": 3.0, "hit_tokens": 100.0}
    assert ev["counters_before"] is None  # no counters.jsonl here


def test_cold_is_not_verified_when_the_whole_first_wave_restored_or_the_reset_was_refused(tmp_path):
    recs = [rec(0, 100, 96), rec(1, 100, 80), rec(4, 100, 0)]
    c = cache_evidence(tmp_path, summary(), recs, "c4", "cold", wave=2)
    assert (c["verified"], c["reason"]) == (False, "the first measured request restored 80 cached tokens (want 0)")
    c = cache_evidence(tmp_path, summary([NO_RESET]), [rec(0, 100, 0)], "c4", "cold", wave=1)
    assert (c["verified"], c["evidence"]["reset"]) == (False, "refused")
    # at C1 the counters read around the first request must show no hit tokens either
    c1 = {**rec(0, 100, 0), "counter_delta": {"hits": 1.0, "hit_tokens": 64.0, "running": 0.0}}
    c = cache_evidence(tmp_path, summary(), [c1], "c4", "cold", wave=1)
    assert (c["verified"], c["evidence"]["first_request"]["counter_delta"]) == (False, {"hits": 1.0,
                                                                                       "hit_tokens": 64.0})
    assert c["reason"] == "the server's counters show 64 hit tokens across the first measured request (want 0)"
    no_backend = summary()
    no_backend["phases"][0]["attribution"] = "none"
    c = cache_evidence(tmp_path, no_backend, [rec(0, 100, 0)], "c4", "cold")
    assert (c["verified"], c["evidence"]["reset"]) == (False, "not sent")
    c = cache_evidence(tmp_path, summary(), [{**rec(0, 100, 0), "usage": {"prompt_tokens": 100}}], "c4", "cold")
    assert c["reason"] == "the server's usage reports no cached_tokens for the first measured request"


def test_warm_needs_the_block_rounded_prompt_or_the_warm_min_share(tmp_path):
    # prompt 100, block 16: (100 - 1) // 16 * 16 = 96 tokens
    assert cache_evidence(tmp_path, summary(), [rec(0, 100, 96)], "c4", "warm")["verified"] is True
    c = cache_evidence(tmp_path, summary(), [rec(0, 100, 95)], "c4", "warm")
    assert (c["verified"], c["evidence"]["required_cached_tokens"]) == (False, 96)
    c = cache_evidence(tmp_path, summary(), [rec(0, 100, 90)], "c4", "warm", warm_min=0.9)
    assert (c["verified"], c["evidence"]["required_cached_tokens"]) == (True, 90)
    c = cache_evidence(tmp_path, {"phases": []}, [rec(0, 100, 99)], "c4", "warm")
    assert c["verified"] is False and "no block size" in c["reason"]


def test_as_is_is_never_verified_and_nothing_sent_is_said(tmp_path):
    c = cache_evidence(tmp_path, summary(), [rec(0, 100, 0)], "c4", "as-is")
    assert c["verified"] is False and c["reason"].startswith("as-is")
    c = cache_evidence(tmp_path, summary(), [], "c4", "cold")
    assert c["reason"] == "no request of the measured phase was sent"


def test_block_size_is_found_anywhere_in_the_identity():
    assert block_size_of({"a": [1], "b": {"c": {"block_size": 32}}}) == 32
    assert block_size_of({"cache_config": {"block_size": "16"}}) == 16  # vLLM's cache_config_info labels
    assert block_size_of({"block_size": 0}) is None and block_size_of(None) is None
