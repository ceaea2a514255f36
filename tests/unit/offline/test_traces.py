"""Mooncake trace loading, and the one-pass curve against RadixCache on the real trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvreplay.errors import WorkloadError
from kvreplay.offline.sources import block_requests_from_trace, trace_tokens
from kvreplay.offline.traces import is_block_trace, load_block_trace
from kvreplay.sim.cache_radix import RadixCache

ROOT = Path(__file__).resolve().parents[3]
MOONCAKE = ROOT / "fixtures" / "traces" / "mooncake_fast25_conversation_trace.jsonl"


def write(tmp_path, lines):
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_load_small(tmp_path):
    p = write(
        tmp_path,
        [
            '{"timestamp": 0, "input_length": 1030, "output_length": 5, "hash_ids": [0, 1, 2]}',
            "",
            '{"timestamp": 7, "input_length": 1024, "output_length": 5, "hash_ids": [0, 1]}',
        ],
    )
    assert is_block_trace(p)
    t = load_block_trace(p)
    assert len(t) == 2
    assert t.blocks.tolist() == [0, 1, 2, 0, 1]
    assert t.block_tok.tolist() == [512, 512, 6, 512, 512]
    assert t.starts.tolist() == [0, 3, 5]
    assert t.timestamp_ms.tolist() == [0.0, 7.0]
    br = block_requests_from_trace(t)
    # full blocks only: 2 and 2; lookups (1030-1)//512 = 2 and (1024-1)//512 = 1
    assert br.starts.tolist() == [0, 2, 4] and br.lookup_blocks.tolist() == [2, 1]
    c = br.curve()
    assert c.at(1) == (1, 512) and c.at(2) == (1, 512)


@pytest.mark.parametrize(
    "line,msg",
    [
        ('{"input_length": 1030, "hash_ids": [0, 1]}', "expected ceil"),
        ('{"input_length": 10, "hash_ids": [0, 0]}', "expected ceil"),
        ('{"input_length": 600, "hash_ids": [4, 4]}', "repeats"),
        ('{"hash_ids": [0]}', "not a block-trace row"),
        ("not json", "not a block-trace row"),
    ],
)
def test_load_rejects(tmp_path, line, msg):
    with pytest.raises(WorkloadError, match=msg) as ei:
        load_block_trace(write(tmp_path, [line]))
    assert ei.value.line == 1


def test_trace_tokens_mapping(tmp_path):
    p = write(
        tmp_path,
        [
            '{"input_length": 1030, "hash_ids": [7, 8, 9]}',
            '{"input_length": 1024, "hash_ids": [7, 8]}',
        ],
    )
    t = load_block_trace(p)
    assert trace_tokens(t, 0, 2) == [7, 7, 8, 8, 9]
    assert trace_tokens(t, 1, 3) == [7, 7, 7, 8, 8, 8]


def test_interleaved_trace_renames_foreign_blocks(tmp_path):
    a = load_block_trace(write(tmp_path, ['{"input_length": 1025, "hash_ids": [0, 1, 2]}'] * 3))
    br = block_requests_from_trace(a, a, 2)
    # a a f a: the foreign copy is renamed (ids 3, 4) so it never hits a's blocks
    assert br.blocks.tolist() == [0, 1, 0, 1, 3, 4, 0, 1]
    assert br.counted.tolist() == [True, True, False, True]


def test_mooncake_whole_trace_facts():
    t = load_block_trace(MOONCAKE)
    assert len(t) == 12031 and len(t.blocks) == 288500
    assert len(np.unique(t.blocks)) == 182790
    assert int(t.input_tokens.sum()) == 144793823


@pytest.mark.parametrize("cap", [1, 40, 700, 5000])
def test_mooncake_slice_equals_radixcache(cap):
    """First 1500 requests: one-pass hits == the sim's RadixCache (2 tokens per trace block)."""
    t = load_block_trace(MOONCAKE, limit=1500)
    br = block_requests_from_trace(t)
    c = br.curve()
    cache = RadixCache(capacity_blocks=cap, block_size=2)
    hit_req = hit_blocks = 0
    for r in range(len(t)):
        out = cache.request(trace_tokens(t, r, 2))
        hit_req += out.device_hit_tokens > 0
        hit_blocks += out.device_hit_tokens // 2
    assert c.at(cap) == (hit_req, hit_blocks * 512)


@pytest.mark.slow
@pytest.mark.parametrize("cap", [3000, 35421])
def test_mooncake_whole_trace_equals_radixcache(cap):
    """All 12,031 requests at two capacities (about 2 s each through the sim class)."""
    t = load_block_trace(MOONCAKE)
    br = block_requests_from_trace(t)
    c = br.curve()
    cache = RadixCache(capacity_blocks=cap, block_size=2)
    hit_req = hit_blocks = 0
    for r in range(len(t)):
        out = cache.request(trace_tokens(t, r, 2))
        hit_req += out.device_hit_tokens > 0
        hit_blocks += out.device_hit_tokens // 2
    assert c.at(cap) == (hit_req, hit_blocks * 512)
