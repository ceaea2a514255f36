import pytest

from kvreplay.backends import Profile, builtin_profile_names, load_profile
from kvreplay.backends._prom import parse_exposition
from kvreplay.errors import ConfigError
from kvreplay.runner.backend import COMMON_UNITS, COUNTER_NAMES, GAUGE_NAMES

BOTH = """vllm:prefix_cache_queries_total{engine="0"} 100
vllm:gpu_prefix_cache_queries_total{engine="0"} 70
vllm:prefix_cache_hits_total{engine="0"} 40
vllm:gpu_prefix_cache_hits_total{engine="0"} 30
"""
DEPRECATED_ONLY = """vllm:gpu_prefix_cache_queries_total{engine="0"} 70
vllm:gpu_prefix_cache_hits_total{engine="0"} 30
"""
TWO_ENGINES = """vllm:prefix_cache_queries_total{engine="0"} 100
vllm:prefix_cache_queries_total{engine="1"} 20
vllm:num_requests_running{engine="0"} 1
vllm:num_requests_running{engine="1"} 2
"""


def apply(profile, text):
    return profile.apply(parse_exposition(text))


def test_current_name_wins_and_deprecated_duplicate_is_not_added():
    common, _ = apply(load_profile("vllm"), BOTH)
    assert common["query_tokens"] == 100  # not 170
    assert common["hit_tokens"] == 40  # not 70


def test_deprecated_name_used_when_current_is_absent():
    common, _ = apply(load_profile("vllm"), DEPRECATED_ONLY)
    assert common["query_tokens"] == 70
    assert common["hit_tokens"] == 30


def test_per_engine_series_are_summed():
    common, _ = apply(load_profile("vllm"), TWO_ENGINES)
    assert common["query_tokens"] == 120
    assert common["running"] == 3


def test_absent_series_are_absent_never_zero():
    common, started = apply(load_profile("vllm"), "vllm:num_requests_running 0\n")
    assert common == {"running": 0}
    assert started is None
    assert "hit_tokens" not in common and "prompt_tokens" not in common


def test_sglang_gauges_take_max_over_tp_ranks_and_prefer_current_names():
    text = (
        'sglang:num_running_reqs{tp_rank="0"} 4\nsglang:num_running_reqs{tp_rank="1"} 4\n'
        "sglang:num_requests_running 9\n"
        'sglang:cached_tokens_total{cache_source="device"} 50\n'
        'sglang:cached_tokens_total{cache_source="host"} 30\n'
    )
    common, _ = apply(load_profile("sglang"), text)
    assert common["running"] == 4
    assert common["hit_tokens"] == 80
    assert common["host_reused_tokens"] == 30


def test_label_filter_selects_the_source():
    text = (
        'vllm:prompt_tokens_by_source_total{source="local_compute"} 12\n'
        'vllm:prompt_tokens_by_source_total{source="local_cache_hit"} 32\n'
    )
    common, _ = apply(load_profile("vllm"), text)
    assert common["computed_tokens"] == 12


def test_started_is_the_largest_marker_present():
    text = 'process_start_time_seconds 100\nvllm:prefix_cache_queries_created{engine="0"} 160\n'
    _, started = apply(load_profile("vllm"), text)
    assert started == 160


def test_builtin_profiles_load_and_name_only_common_names():
    names = builtin_profile_names()
    assert {"vllm", "sglang", "llamacpp"} <= set(names)
    for name in names:
        p = load_profile(name)
        for m in p.maps:
            assert m.common in COUNTER_NAMES or m.common in GAUGE_NAMES
        assert set(p.load_gauges) <= {m.common for m in p.maps}


def test_vllm_profile_says_hits_are_tokens():
    units = load_profile("vllm").units
    assert units["hit_tokens"] == units["query_tokens"] == units["host_hit_tokens"] == "tokens"
    # lookups/hits/host_hits count lookups everywhere; vLLM counts tokens, so it has none.
    assert not {"lookups", "hits", "host_lookups", "host_hits"} & set(units)


def test_every_common_name_keeps_one_unit_across_builtin_profiles():
    for name in builtin_profile_names():
        for common, unit in load_profile(name).units.items():
            if common in COMMON_UNITS:
                assert unit == COMMON_UNITS[common], (name, common, unit)


def test_an_old_profile_counting_hits_in_tokens_still_loads_under_the_token_names(tmp_path):
    # A profile written for the old vLLM meaning: host_hits / lookups in tokens.
    f = tmp_path / "old.toml"
    f.write_text(
        'name = "old"\n'
        '[common.host_hits]\nseries = ["x_external_hits_total"]\nunit = "tokens"\n'
        '[common.lookups]\nseries = ["x_queries_total"]\nunit = "tokens"\n'
        '[common.query_tokens]\nseries = ["x_queries_total"]\nunit = "tokens"\n'
        '[common.host_lookups]\nseries = ["x_host_lookups_total"]\nunit = "lookups"\n'
    )
    p = load_profile(str(f))
    assert p.units == {"host_hit_tokens": "tokens", "query_tokens": "tokens",
                       "host_lookups": "lookups"}
    common, _ = p.apply(parse_exposition(
        "x_external_hits_total 640\nx_queries_total 900\nx_host_lookups_total 3\n"))
    assert common == {"host_hit_tokens": 640, "query_tokens": 900, "host_lookups": 3}


def test_profile_file_by_path(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(
        'name = "mine"\nload_gauges = ["running"]\n'
        '[common.running]\nseries = ["my_busy"]\n'
        '[common.hits]\nseries = [{ name = "my_hits_total", labels = { tier = "gpu" } }]\n'
    )
    p = load_profile(f)
    common, _ = p.apply(
        parse_exposition('my_busy 2\nmy_hits_total{tier="gpu"} 5\nmy_hits_total{tier="cpu"} 7\n')
    )
    assert common == {"running": 2, "hits": 5}


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"name": "x", "common": {"hits": {"series": ["a"]}}, "colour": 1}, "colour"),
        ({"name": "x", "common": {"hitz": {"series": ["a"]}}}, "common.hitz"),
        ({"name": "x", "common": {"hits": {"series": []}}}, "common.hits.series"),
        (
            {"name": "x", "common": {"hits": {"series": ["a"], "aggregate": "avg"}}},
            "common.hits.aggregate",
        ),
        (
            {"name": "x", "common": {"hits": {"series": ["a"]}}, "load_gauges": ["running"]},
            "load_gauges",
        ),
        (
            {"name": "x", "common": {"hits": {"series": ["a"]}}, "reset": {"path": "x"}},
            "reset.path",
        ),
        ({"common": {"hits": {"series": ["a"]}}}, "name"),
    ],
)
def test_invalid_profiles_name_the_field(doc, field):
    with pytest.raises(ConfigError) as ei:
        Profile.from_mapping(doc, where="p.toml")
    assert ei.value.field == field


MINE = """# my profile
name = "mine"
load_gauges = ["running"]

[reset]
method = "POST"
path = "/reset"

[common.running]
series = ["my_busy"]
unit = "requests"

[common.hits]
series = ["my_hits_total", { name = "my_gpu_hits_total", labels = { tier = "gpu" } }]
aggregate = "sum"
unit = "tokens"
"""


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (("unit = \"requests\"", "unit = \"furlongs\""), (11, "common.running.unit")),  # a key in a [common.X]
        (("aggregate = \"sum\"", "aggregate = \"avg\""), (15, "common.hits.aggregate")),  # the second table
        (("unit = \"tokens\"", "unit = \"furlongs\""), (16, "common.hits.unit")),  # not the first table's unit
        (("name = \"my_gpu_hits_total\"", "name = \"\""), (14, "common.hits.series[1]")),  # a list's item: its line
        (("path = \"/reset\"", "path = \"reset\""), (7, "reset.path")),
        (("[common.hits]", "[common.hitz]"), (13, "common.hitz")),  # a table: its header
        (("load_gauges = [\"running\"]", "load_gauges = [\"waiting\"]"), (3, "load_gauges")),  # top level
        (("# my profile", "colour = 1"), (1, "colour")),
    ],
)
def test_a_profile_file_error_names_its_line_and_field(tmp_path, edit, where):
    f = tmp_path / "mine.toml"
    assert load_profile_text(f, MINE).name == "mine"  # the file as written loads
    with pytest.raises(ConfigError) as ei:
        load_profile_text(f, MINE.replace(*edit))
    assert (ei.value.line, ei.value.field) == where
    assert str(ei.value).startswith(f"{f}:{where[0]}, field '{where[1]}': ")


def load_profile_text(f, text):
    f.write_text(text)
    return load_profile(f)


def test_unknown_builtin_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="no built-in profile"):
        load_profile("nonesuch")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_profile(bad)


HOST_TIER = """# synthetic scrape in the example profile's (illustrative) names
process_start_time_seconds 1.7e9
server_prefix_cache_queried_tokens_total 9000
server_prefix_cache_hit_tokens_total 3000
server_prompt_tokens_total 9000
hostcache_lookups_total 52
hostcache_hits_total 12
hostcache_fetched_tokens_total 30000
hostcache_reused_tokens_total 28000
hostcache_stores_total 156
hostcache_evictions_total 116
hostcache_bytes_used 1.5e9
hostcache_rows_used 40
hostcache_pages_used 310
server_requests{state="active"} 0
server_requests{state="pending"} 0
server_requests{state="retiring"} 1
hostcache_transfers_in_flight 0
hostcache_transfers_waiting 2
hostcache_config_info{rows="40",pages="512"} 1
"""


def test_example_host_tier_profile_maps_every_host_series():
    p = load_profile("example-host-tier")
    common, started = p.apply(parse_exposition(HOST_TIER))
    assert common == {
        "query_tokens": 9000,
        "hit_tokens": 3000,
        "prompt_tokens": 9000,
        "host_lookups": 52,
        "host_hits": 12,
        "host_fetched_tokens": 30000,
        "host_reused_tokens": 28000,
        "host_stores": 156,
        "host_evictions": 116,
        "host_bytes": 1.5e9,
        "host_rows_used": 40,
        "host_pages_used": 310,
        "running": 0,
        "waiting": 0,
        "retiring": 1,
        "transfers_in_flight": 0,
        "transfers_waiting": 2,
    }
    assert started == 1.7e9
    assert p.info(parse_exposition(HOST_TIER)) == {
        "hostcache_config_info": {"rows": "40", "pages": "512"}
    }


def test_example_host_tier_drain_is_blocked_by_retiring_and_transfers():
    from kvreplay.backends import make_backend
    from kvreplay.backends._common import drain_blockers
    from kvreplay.runner.backend import Snapshot

    b = make_backend("prometheus", "", None, profile="example-host-tier")
    raw, common, started = b.parse(HOST_TIER)
    s = Snapshot(taken_ns=0, raw=raw, common=common, started=started)
    assert b.drained(s, s) is False
    assert drain_blockers(s, s, b.load_gauges) == ["retiring=1", "transfers_waiting=2"]
    idle = dict(common, retiring=0, transfers_waiting=0)
    s2 = Snapshot(taken_ns=1, raw=raw, common=idle, started=started)
    assert b.drained(s2, s2) is True


def test_declared_counter_without_samples_reads_zero_not_absent():
    from kvreplay.backends import make_backend

    # prometheus_client before the first increment of a labelled counter (SGLang
    # increments cached_tokens only when a request had cached tokens).
    before_first_hit = (
        "# HELP sglang:cached_tokens_total Number of cached prompt tokens.\n"
        "# TYPE sglang:cached_tokens_total counter\n"
        "# TYPE sglang:prompt_tokens_total counter\n"
        'sglang:prompt_tokens_total{model_name="m"} 120.0\n'
    )
    _, common, _ = make_backend("sglang", "", None).parse(before_first_hit)
    assert common["hit_tokens"] == 0
    assert common["host_reused_tokens"] == 0


def test_filtered_label_missing_from_an_older_build_stays_absent():
    from kvreplay.backends import make_backend

    older = (
        '# TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total{model_name="m"} 40\n'
    )
    _, common, _ = make_backend("sglang", "", None).parse(older)
    assert common["hit_tokens"] == 40
    assert "host_reused_tokens" not in common  # no cache_source label at all: not reported
    newer = (
        "# TYPE sglang:cached_tokens_total counter\n"
        'sglang:cached_tokens_total{model_name="m",cache_source="device"} 40\n'
    )
    _, common, _ = make_backend("sglang", "", None).parse(newer)
    assert common["host_reused_tokens"] == 0  # labelled by source, host never incremented


@pytest.mark.parametrize(
    ("text", "line"),
    [
        # dotted keys at the top level: the line of the dotted key, not none
        ('name = "mine"\nload_gauges = ["running"]\ncommon.running.series = ["b"]\n'
         'common.running.unit = "furlongs"\n', 4),
        # dotted keys under a table's header
        ('name = "mine"\nload_gauges = ["running"]\n\n[common]\nrunning.series = ["b"]\n'
         'running.unit = "furlongs"\n', 6),
        # a header with a single-quoted (literal) key, as with a double-quoted one
        ("name = \"mine\"\nload_gauges = [\"running\"]\n\n[common.'running']\nseries = [\"b\"]\n"
         "unit = \"furlongs\"\n", 6),
        # an inline table: its key's line
        ('name = "mine"\nload_gauges = ["running"]\n\n[common]\nrunning = { series = ["b"], unit = "furlongs" }\n', 5),
    ],
)
def test_a_dotted_or_literal_key_names_its_line(tmp_path, text, line):
    with pytest.raises(ConfigError) as ei:
        load_profile_text(tmp_path / "mine.toml", text)
    assert (ei.value.line, ei.value.field) == (line, "common.running.unit")
