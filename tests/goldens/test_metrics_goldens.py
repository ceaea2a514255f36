"""Golden tests: every captured dump in fixtures/metrics/<server>/<version>.prom.

Two checks per dump:

1. The common values equal literals read BY HAND from the file (the line each
   literal was read from is in the comment), never re-derived by the code.
2. The whole parse (identity, common, started, raw) equals the JSON file in
   tests/goldens/expected/. ``KVREPLAY_UPDATE_GOLDENS=1`` rewrites those files and
   then fails, so a rewrite is never silent.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from kvreplay.backends import parse_dump

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "metrics"
EXPECTED = Path(__file__).resolve().parent / "expected"
DUMPS = sorted(FIXTURES.glob("*/*.prom"))
UPDATE = os.environ.get("KVREPLAY_UPDATE_GOLDENS") == "1"


def _id(p: Path) -> str:
    return f"{p.parent.name}/{p.name}"


# Values read by hand from each file.
HAND = {
    "vllm/nvcr-25.09.prom": {
        "common": {
            # l.63 vllm:prefix_cache_queries_total{engine="0",...} 246.0 (unit: tokens);
            # NOT + l.48 vllm:gpu_prefix_cache_queries_total 246.0. vLLM counts lookups in
            # tokens, so "lookups"/"hits" (lookup counts everywhere) are absent.
            "query_tokens": 246.0,
            "hit_tokens": 80.0,  # l.69 vllm:prefix_cache_hits_total 80.0; NOT + l.54 gpu_ 80.0
            "prompt_tokens": 246.0,  # l.81 vllm:prompt_tokens_total{...} 246.0
            "running": 0.0,  # l.39 vllm:num_requests_running{...} 0.0
            "waiting": 0.0,  # l.42 vllm:num_requests_waiting{...} 0.0
        },
        # max of l.27 process_start_time_seconds 1.77104238234e+09,
        # l.66 vllm:prefix_cache_queries_created 1.771042457420837e+09,
        # l.51 vllm:gpu_prefix_cache_queries_created 1.7710424574207425e+09
        "started": 1.771042457420837e09,
        "identity_subset": {
            "block_size": "16",
            "num_gpu_blocks": "850",
            "enable_prefix_caching": "True",
        },  # l.419
        "series": 360,  # grep -c '^[^#]' (sample lines)
    },
    "sglang/docs-2024-11.prom": {
        "common": {
            # l.15 sglang:prompt_tokens_total{name="google/gemma-2-9b-it"} 506780.0
            "prompt_tokens": 506780.0,
            "running": 0.0,  # l.21 sglang:num_requests_running{...} 0.0 (2024 name)
            "waiting": 0.0,  # l.24 sglang:num_requests_waiting{...} 0.0 (2024 name)
        },
        # no hit_tokens: sglang:cached_token (l.39) is a per-batch gauge,
        # not the cached_tokens_total counter
        "started": None,
        "identity_subset": {},
        "series": 135,
    },
    "llamacpp/ik-pr695.prom": {
        "common": {
            # l.3 llamacpp:prompt_tokens_total 6886 (processed, cache excluded)
            "computed_tokens": 6886.0,
            "running": 0.0,  # l.27 llamacpp:requests_processing 0
            "waiting": 0.0,  # l.30 llamacpp:requests_deferred 0
        },
        "started": None,
        "identity_subset": {},
        "series": 10,
    },
}


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def test_every_dump_has_hand_values():
    assert DUMPS, "no dumps in fixtures/metrics"
    assert sorted(_id(p) for p in DUMPS) == sorted(HAND)


@pytest.mark.parametrize("dump", DUMPS, ids=_id)
def test_common_equals_hand_read_values(dump):
    hand = HAND[_id(dump)]
    name, identity, raw, common, started = parse_dump(
        dump.read_text(encoding="utf-8"), dump.parent.name
    )
    assert name == dump.parent.name
    assert common == hand["common"]
    assert started == hand["started"]
    assert len(raw) == hand["series"]
    cache_config = identity.get("cache_config", {})
    assert {k: cache_config.get(k) for k in hand["identity_subset"]} == hand["identity_subset"]


@pytest.mark.parametrize("dump", DUMPS, ids=_id)
def test_auto_detects_the_family_from_the_text(dump):
    name, *_ = parse_dump(dump.read_text(encoding="utf-8"), "auto")
    assert name == dump.parent.name


@pytest.mark.parametrize("dump", DUMPS, ids=_id)
def test_whole_parse_equals_golden(dump):
    name, identity, raw, common, started = parse_dump(
        dump.read_text(encoding="utf-8"), dump.parent.name
    )
    got = _jsonable(
        {"backend": name, "identity": identity, "common": common, "started": started, "raw": raw}
    )
    golden = EXPECTED / f"{dump.parent.name}__{dump.stem}.json"
    if UPDATE:
        golden.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        pytest.fail(f"KVREPLAY_UPDATE_GOLDENS=1: rewrote {golden.name}; rerun without it")
    assert golden.exists(), f"missing {golden}; run once with KVREPLAY_UPDATE_GOLDENS=1"
    assert got == json.loads(golden.read_text(encoding="utf-8"))


@pytest.mark.parametrize("dump", DUMPS, ids=_id)
def test_raw_keys_are_the_printed_series(dump):
    text = dump.read_text(encoding="utf-8")
    printed = {
        line.rsplit(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")
    }
    _, _, raw, _, _ = parse_dump(text, dump.parent.name)
    assert set(raw) == printed
