"""A filtered counter read parses only the wanted lines and maps what the whole parse maps (issue 31 item 3)."""

from __future__ import annotations

from pathlib import Path

from kvreplay.backends import make_backend
from kvreplay.backends._prometheus import only_wanted, parse_scrape

ROOT = Path(__file__).resolve().parents[3]


def test_only_wanted_keeps_comments_and_named_samples() -> None:
    text = ("# HELP a_total x\n# TYPE a_total counter\na_total 3\n"
            'b{l="1"} 4\n  a_total{l="z"} 5\n\nc 6\n# EOF\n')
    kept, ignored = only_wanted(text, frozenset({"a_total", "c"}))
    assert kept == "# HELP a_total x\n# TYPE a_total counter\na_total 3\n  a_total{l=\"z\"} 5\n\nc 6\n# EOF\n"
    assert ignored is True
    assert only_wanted("a_total 1\n", frozenset({"a_total"})) == ("a_total 1\n", False)


def test_filtered_parse_of_vllm_scrape_equals_the_whole_parse_restricted() -> None:
    text = (ROOT / "fixtures" / "metrics" / "vllm" / "nvcr-25.09.prom").read_text()
    b = make_backend("vllm", "http://127.0.0.1:1", None)
    wanted = b.wanted_names()
    raw_f, common_f, started_f, invalid_f, declared_f, ignored_f, info_f = parse_scrape(
        text, b.profile, frozenset(), None)
    raw_p, common_p, started_p, invalid_p, declared_p, ignored_p, info_p = parse_scrape(
        text, b.profile, frozenset(), wanted)
    assert (common_p, started_p, invalid_p, declared_p, info_p) == (common_f, started_f, invalid_f, declared_f, info_f)
    assert raw_p == {k: v for k, v in raw_f.items() if k.split("{")[0] in wanted}
    assert (ignored_f, ignored_p) == (False, True)
    assert common_p["hit_tokens"] == common_f["hit_tokens"] and "info" in info_p
