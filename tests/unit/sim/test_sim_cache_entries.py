"""EntriesCache: issue 5 scenarios 1 and 2 at the model level, values derived by hand.

Synthetic prompts: a system block of 100 tokens, a user turn of 20, a generation
prompt of 4 (n = 124). Snapshot offsets (100, 120): end of system, end of messages.
"""

from __future__ import annotations

import pytest

from kvreplay.sim.cache_entries import EntriesCache

SYS, USER, GEN = 100, 20, 4


def prompt(system_id: int, user_id: int = 0) -> list[int]:
    base = 10_000 * (system_id + 1)
    return (
        list(range(base, base + SYS))
        + list(range(base + 5000 + 100 * user_id, base + 5000 + 100 * user_id + USER))
        + [1, 2, 3, 4]
    )


OFFSETS_2 = (SYS, SYS + USER)
OFFSETS_1 = (SYS,)


def test_scenario1_thirty_distinct_prompts():
    # Each of 30 prompts has its own system block: 30 misses, each storing 2
    # snapshots = 60 stores; 8 held at the end, so 52 evicted; stores - evicted = 8.
    c = EntriesCache(max_entries=8)
    for i in range(30):
        c.request(prompt(i), OFFSETS_2)
    j = c.cache_json()
    assert (j["misses"], j["hits"], j["stores"], j["evicted"], j["entries"]) == (30, 0, 60, 52, 8)
    assert j["stores"] - j["evicted"] == j["max_entries"] == 8


@pytest.mark.parametrize("k", range(0, 11))
@pytest.mark.parametrize(("offsets", "threshold"), [(OFFSETS_2, 4), (OFFSETS_1, 8)])
def test_scenario2_eviction_probe(k, offsets, threshold):
    # P stores len(offsets) snapshots, each foreign prompt (own system block) as many;
    # LRU keeps the last 8, P's are the oldest: P survives while
    # len(offsets) * (1 + k) <= 8, i.e. k <= 3 with two snapshots, k <= 7 with one.
    c = EntriesCache(max_entries=8)
    c.request(prompt(0), offsets)
    for j in range(k):
        c.request(prompt(100 + j), offsets)
    out = c.request(prompt(0), offsets)
    expected = offsets[-1] if k < threshold else 0  # 120 (messages) or 100 (system)
    assert out.hit_tokens == expected
    assert out.hit is (k < threshold)


def test_hit_on_system_stores_one_and_refreshes():
    c = EntriesCache(max_entries=3)
    a = c.request(prompt(0, 0), OFFSETS_2)
    assert (a.hit, len(a.stored)) == (False, 2)
    b = c.request(prompt(0, 1), OFFSETS_2)  # same system, new user turn
    assert (b.hit, b.matched_tokens, b.hit_tokens, len(b.stored), b.already_held) == (True, 100, 100, 1, (100,))
    # LRU order now: msg(0,0), sys0 (refreshed by the hit), msg(0,1)
    assert c.held_lengths() == [120, 100, 120]
    d = c.request(prompt(5), OFFSETS_1)  # one new snapshot evicts the LRU: msg(0,0)
    assert [e.tokens for e in d.evicted] == [120]
    assert c.request(prompt(0, 0), ()).hit_tokens == 100  # only the system snapshot is left


def test_full_prompt_snapshot_capped_at_n_minus_1():
    c = EntriesCache(max_entries=2)
    p = prompt(0)
    c.request(p, (len(p),))
    assert c.request(p, ()).hit_tokens == len(p) - 1 == 123


def test_over_cap_is_truncated_to_the_first_tokens_that_fit():
    # cap 1100 B at 10 B/token = 110 tokens: the 120-token snapshot keeps its first 110
    c = EntriesCache(max_entries=8, bytes_per_token=10, max_entry_bytes=1100)
    out = c.request(prompt(0), OFFSETS_2)
    assert [e.tokens for e in out.stored] == [100, 110]
    assert (out.refused, out.truncated) == ((), (120,))
    j = c.cache_json()
    assert (j["refused"], j["stores"], j["bytes"], j["last_entry_bytes"]) == (0, 2, 2100, 1100)
    assert c.stats.truncated == 1 and c.cap_tokens == 110
    # the same prompt again: its first 110 tokens are held, so it hits 110 (not 120)
    again = c.request(prompt(0), OFFSETS_2)
    assert (again.hit, again.hit_tokens) == (True, 110)
    assert again.already_held == (100, 110) and again.truncated == (120,)
    # another user turn shares only the 100-token system block with it
    assert c.request(prompt(0, 1), ()).hit_tokens == 100


def test_two_offsets_truncating_to_one_length_store_one_snapshot():
    c = EntriesCache(max_entries=8, bytes_per_token=10, max_entry_bytes=900)  # 90 tokens
    out = c.request(prompt(0), OFFSETS_2)
    assert [e.tokens for e in out.stored] == [90] and out.truncated == (100, 120)
    assert c.cache_json()["refused"] == 0


def test_refused_and_bytes():
    # --sim-refuse-over-bytes: the older behaviour, for servers that refuse
    c = EntriesCache(max_entries=8, bytes_per_token=10, max_entry_bytes=1100, refuse_over_bytes=True)
    out = c.request(prompt(0), OFFSETS_2)  # 100 * 10 = 1000 fits, 120 * 10 = 1200 refused
    assert [e.tokens for e in out.stored] == [100] and out.refused == (120,)
    j = c.cache_json()
    assert (j["refused"], j["bytes"], j["last_entry_bytes"], j["rows_copied"]) == (1, 1000, 1000, 100)


def test_max_bytes_evicts_lru():
    c = EntriesCache(max_entries=8, bytes_per_token=1, max_bytes=250)
    c.request(prompt(0), OFFSETS_1)  # 100
    c.request(prompt(1), OFFSETS_1)  # 200
    out = c.request(prompt(2), OFFSETS_1)  # 300 > 250: evict the oldest
    assert [e.tokens for e in out.evicted] == [100] and c.bytes == 200


def test_clear_keeps_counters_and_costs():
    c = EntriesCache(max_entries=8, restore_s_per_token=0.001, store_s_per_token=0.0001)
    c.request(prompt(0), OFFSETS_2)
    out = c.request(prompt(0), OFFSETS_2)
    assert out.restore_s == pytest.approx(0.120)  # 120 tokens restored x 1 ms
    j = c.cache_json()
    assert j["store_ms_total"] == pytest.approx(22.0)  # (100 + 120) x 0.1 ms
    assert j["restore_ms_total"] == pytest.approx(120.0)
    assert j["hit_rate"] == 0.5
    assert c.clear() == 2
    j2 = c.cache_json()
    assert (j2["entries"], j2["bytes"], j2["hits"], j2["stores"]) == (0, 0, 1, 2)
    assert set(j2) == {
        "entries", "bytes", "last_entry_bytes", "max_entries", "hits", "misses", "stores", "evicted",
        "prompt_tokens_saved", "store_ms_total", "restore_ms_total", "refused", "rows_copied", "hit_rate",
    }
