from kvreplay.metrics.histograms import LatencySet
from kvreplay.metrics.summary import PhaseStats


def rec(pos, status="ok", cached=10, hit=10, ttft_ns=5_000_000):
    return {"phase": "p", "position": pos, "body_index": pos, "status": status, "sent": True,
            "usage": {"prompt_tokens": 100, "completion_tokens": 4, "cached_tokens": cached},
            "counter_delta": {"hit_tokens": hit}, "ttft_ns": ttft_ns, "e2e_ns": 2 * ttft_ns}


def test_cross_check_lists_disagreements():
    st = PhaseStats("p", 1, 1, 3)
    st.add(rec(0, cached=0, hit=0))
    st.add(rec(1, cached=96, hit=100))
    st.add(rec(2, cached=None, hit=16))
    st.counter_delta = {"hit_tokens": 116}
    cc = st.to_json()["cross_check"]
    assert cc["requests_disagreeing"] == 1
    assert cc["disagreements"] == [{"position": 1, "body_index": 1, "usage_cached_tokens": 96,
                                    "counter_hit_tokens": 100}]
    assert cc["agree"] is False and cc["usage_cached_tokens"] is None
    assert "did not report" in cc["note"]


def test_counts_and_failures():
    st = PhaseStats("p", 2, 1, 4)
    st.add(rec(0))
    st.add(rec(1, status="timeout"))
    st.add({"phase": "p", "position": 2, "body_index": 2, "status": "aborted", "sent": False})
    st.add(rec(3), token_ns=[0, 1_000_000, 3_000_000])
    j = st.to_json()
    assert (j["sent"], j["ok"], j["not_sent"], j["failed"]) == (3, 2, 1, {"timeout": 1})
    assert j["tokens"] == {"prompt": 200, "cached": 20, "completion": 8, "cached_unknown": 0}
    assert j["ttft_ms"]["n"] == 2 and abs(j["ttft_ms"]["p50"] - 5.0) <= 0.005  # 3 significant digits
    assert j["itl_ms"]["n"] == 2 and abs(j["itl_ms"]["max"] - 2.0) <= 0.002
    assert j["cross_check"] is None  # no phase delta with hit_tokens


def test_hdr_recorder_counts_out_of_range_and_keeps_the_stall():
    # HdrHistogram's canonical case: 10,000 x 1 ms plus one 100 s stall.
    ls = LatencySet()
    for _ in range(10_000):
        ls.record_ns(1_000_000)
    ls.record_ns(100_000_000_000)
    s = ls.summary_ms()
    assert s["n"] == 10_001 and s["p50"] == 1.0 and s["p99"] == 1.0
    assert 99_900 <= s["max"] <= 100_100
    assert abs(s["mean"] - (10_000 * 1 + 100_000) / 10_001) < 1e-3
    ls.record_ns(7_200 * 10**9)  # two hours: beyond the 1 h range
    assert ls.out_of_range == 1 and ls.summary_ms()["n"] == 10_001


def test_cross_check_counts_host_tier_tokens():
    # Usage cached_tokens counts device hits plus what a host tier supplied (vLLM: local
    # + external); the counters say so in two names, and the cross-check adds them.
    st = PhaseStats("p", 1, 1, 2)
    r0 = rec(0, cached=3440, hit=3440)
    r1 = rec(1, cached=3900, hit=3440)
    r1["counter_delta"]["host_fetched_tokens"] = 460
    r0["counter_delta"]["host_fetched_tokens"] = 0
    st.add(r0)
    st.add(r1)
    st.counter_delta = {"hit_tokens": 6880, "host_fetched_tokens": 460}
    cc = st.to_json()["cross_check"]
    assert cc["agree"] is True and cc["counter_hit_tokens"] == 7340 == cc["usage_cached_tokens"]
    assert cc["counted_as"] == "hit_tokens + host_fetched_tokens"


def test_tpot_needs_a_decode_interval():
    # A non-streamed answer: one body, so first token = last token = done and
    # TTFT == E2E; the runner's tpot_ns comes out 0. It is no TPOT sample.
    nostream = {**rec(0), "usage": {"prompt_tokens": 10, "completion_tokens": 132, "cached_tokens": 0},
                "ttft_ns": 43_000_000, "e2e_ns": 43_000_000, "tpot_ns": 0,
                "t_first_token_ns": 57_000_000, "t_last_token_ns": 57_000_000, "itl": None}
    one_token = {**rec(1), "usage": {"prompt_tokens": 10, "completion_tokens": 1, "cached_tokens": 0},
                 "tpot_ns": 0}
    st = PhaseStats("p", 1, 1, 2)
    st.add(nostream, token_ns=[57_000_000])
    st.add(one_token)
    j = st.to_json()
    assert j["tpot_ms"]["n"] == 0 and j["tpot_ms"]["p50"] is None
    assert j["itl_ms"]["n"] == 0
    assert j["ttft_ms"]["n"] == 2 and j["e2e_ms"]["n"] == 2  # TTFT and E2E are still measured
    # rebuilt from records (no token times): the record's own timestamps decide
    st = PhaseStats("p", 1, 1, 1)
    st.add(nostream)
    assert st.to_json()["tpot_ms"]["n"] == 0


def test_tpot_of_a_stream_is_kept():
    streamed = {**rec(0), "tpot_ns": 2_000_000,
                "t_first_token_ns": 10_000_000, "t_last_token_ns": 16_000_000}
    st = PhaseStats("p", 1, 1, 2)
    st.add(streamed, token_ns=[10_000_000, 12_000_000, 14_000_000, 16_000_000])
    st.add(streamed)
    j = st.to_json()
    assert j["tpot_ms"]["n"] == 2 and abs(j["tpot_ms"]["p50"] - 2.0) <= 0.002


def test_service_throughput_leaves_out_the_pauses_between_requests():
    # C1 with per-request counter reads: four 100 ms requests in a 1.0 s phase (150 ms of
    # counter reads after each). Wall clock: 4 / 1.0 s = 4.0 req/s; service time:
    # 4 * 1 / (4 * 0.1 s) = 10.0 req/s.
    st = PhaseStats("p", 1, 1, 4)
    for i in range(4):
        st.add(rec(i, ttft_ns=50_000_000))  # e2e_ns = 100 ms
    st.start_ns, st.end_ns = 1_000_000_000, 2_000_000_000
    j = st.to_json()
    assert (j["throughput_rps"], j["service_throughput_rps"]) == (4.0, 10.0)
    # C2: the same four requests, two slots: 4 * 2 / 0.4 s = 20.0 req/s.
    st.concurrency = 2
    assert st.to_json()["service_throughput_rps"] == 20.0
    # An open loop's rate is its schedule's: no service throughput.
    st.open_loop = True
    assert st.to_json()["service_throughput_rps"] is None
    assert PhaseStats("q", 1, 1, 0).to_json()["service_throughput_rps"] is None


def test_the_schedule_note_blames_the_concurrency_cap_only_when_it_held_a_send_back():
    # Issue 42 item 6: an open-loop C1 phase whose second send went out 120 ms late. When the
    # runner found every slot busy past that send's intended time (cap_wait_max_ns 120 ms),
    # the cap is named; when the slot was free (the previous request had ended; the send was
    # late because the loop was held, 0 ns of cap wait), it is not, and the loop is.
    st = PhaseStats("o", 1, 1, 2)
    st.open_loop = True
    st.add({**rec(0), "queue_ns": 0})
    st.add({**rec(1), "queue_ns": 120_000_000})
    st.cap_wait_max_ns = 0
    # The queue histogram's max: 120,000 us sits in the 64 us-wide buckets of [65,536,
    # 131,072) at 3 significant digits; its bucket [120,000, 120,063] reports 120.063 ms.
    s = st.to_json()["schedule"]
    assert (s["kept_schedule"], s["cap_wait_max_ms"]) == (False, 0.0)
    assert s["note"] == ("client could not keep schedule: sends up to 120.063 ms late with a slot free under the "
                         "concurrency cap 1 (the client's loop or host held them: see client.loop_lag_p99_ms); "
                         "see *_from_intended latencies")
    st.cap_wait_max_ns = 120_000_000
    s = st.to_json()["schedule"]
    assert s["cap_wait_max_ms"] == 120.0
    assert s["note"] == ("client could not keep schedule: sends up to 120.063 ms late (concurrency cap 1 was full: "
                         "a send waited up to 120.0 ms for a free slot); see *_from_intended latencies")
    # A cap wait within the slack (10 ms) is not blamed either.
    st.cap_wait_max_ns = 9_000_000
    assert "with a slot free" in st.to_json()["schedule"]["note"]
    # Not known (a merge of older workers' payloads): no cause named.
    st.cap_wait_max_ns = None
    assert st.to_json()["schedule"]["note"] == ("client could not keep schedule: sends up to 120.063 ms late; "
                                                "see *_from_intended latencies")


def test_by_turn_cached_unknown_is_absent_not_a_lower_hit_rate():
    # turn 0: two answers, cached 10 + 30 of 200 prompt tokens: 0.2. turn 1: cached 60 on one answer,
    # the other did not report it: cached_unknown 1, and no hit rate (60 / 200 = 0.3 would be a floor
    # passed off as the figure). A failed request counts in neither turn.
    st = PhaseStats("p", 1, 1, 5)
    for pos, turn, cached, status in ((0, 0, 10, "ok"), (1, 0, 30, "ok"), (2, 1, 60, "ok"),
                                      (3, 1, None, "ok"), (4, 1, 50, "timeout")):
        st.add({**rec(pos, status=status, cached=cached), "session": pos % 2, "turn": turn})
    rows = st.to_json()["by_turn"]
    assert [(r["turn"], r["requests"], r["cached_tokens"], r["prompt_tokens"], r["hit_rate"], r.get("cached_unknown"))
            for r in rows] == [(0, 2, 40, 200, 0.2, None), (1, 2, 60, 200, None, 1)]
    assert "cached_unknown" not in rows[0]
