"""``kvreplay import mooncake|bailian --tokenizer``: hash blocks of exactly --block-tokens tokens of a tokenizer.

Through serve-sim's ``/tokenize`` (the simulator stands for any server: its vocabulary is
not the pseudo-words' one here, the block words come from the bundled text). Replayed at
C1 on the radix cache with the trace's block size, every record's cached tokens equal the
trace's hash_ids reuse: leading blocks full here and in an earlier prompt, at most
``(n - 1) // B`` blocks (the rule of ``test_import_mooncake._expected_cached``).
"""

from __future__ import annotations

import orjson
import pytest

import kvreplay
from kvreplay.cli import main
from kvreplay.errors import ConfigError
from kvreplay.rundir.load import open_run
from kvreplay.sim.tokenizer import tokenize_text
from kvreplay.workload.token_blocks import TokenBlocks
from kvreplay.workload.tokenizer_client import open_tokenizer

B = 16
ROWS = [  # 3 full blocks; [0,1] shared + 2 own; [0] + a partial; alone; [0,1,2] + 2 own (one partial)
    {"timestamp": 0, "input_length": 48, "output_length": 4, "hash_ids": [0, 1, 2]},
    {"timestamp": 10, "input_length": 60, "output_length": 5, "hash_ids": [0, 1, 3, 4]},
    {"timestamp": 20, "input_length": 20, "output_length": 6, "hash_ids": [0, 5]},
    {"timestamp": 30, "input_length": 32, "output_length": 7, "hash_ids": [6, 7]},
    {"timestamp": 40, "input_length": 70, "output_length": 8, "hash_ids": [0, 1, 2, 8, 9]},
]
EXPECTED_CACHED = [0, 2 * B, 1 * B, 0, 3 * B]  # by hand from the hash_ids (module docstring)


@pytest.fixture
def sim():
    with kvreplay.serve_sim(time_scale=0, cache="radix", block_size=B) as served:
        yield served


def test_mooncake_blocks_exact_and_reuse_as_the_hash_ids_say(tmp_path, sim, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in ROWS))
    out = tmp_path / "mc.jsonl"
    assert main(["import", "mooncake", str(trace), "--out", str(out), "--block-tokens", str(B),
                 "--tokenizer", sim.url]) == 0
    assert f"5 bodies (230 prompt tokens, sim tokenizer) -> {out}" in capsys.readouterr().out
    prompts = [orjson.loads(x)["prompt"] for x in out.read_bytes().splitlines()]
    ids = [tokenize_text(p) for p in prompts]
    assert [len(t) for t in ids] == [r["input_length"] for r in ROWS]
    assert ids[1][: 2 * B] == ids[0][: 2 * B] and ids[1][2 * B] != ids[0][2 * B]  # blocks 0,1 shared, then not
    assert ids[4][: 3 * B] == ids[0] and ids[2][:B] == ids[0][:B] and ids[3][0] != ids[0][0]
    kvreplay.replay(out, phases=["p:forward:c1"], target=sim.url, out=tmp_path / "run")
    recs = sorted(open_run(tmp_path / "run").iter_records(), key=lambda r: r["body_index"])
    assert [r["usage"]["prompt_tokens"] for r in recs] == [r["input_length"] for r in ROWS]
    assert [r["usage"]["cached_tokens"] for r in recs] == EXPECTED_CACHED


def test_bailian_blocks_exact(tmp_path, sim):
    trace = tmp_path / "b.jsonl"
    rows = [{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 40, "output_length": 3,
             "type": "text", "turn": 1, "hash_ids": [10, 11, 12]},
            {"chat_id": 2, "parent_chat_id": 1, "timestamp": 1.0, "input_length": 70, "output_length": 3,
             "type": "text", "turn": 2, "hash_ids": [10, 11, 13, 14, 15]}]
    trace.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    assert main(["import", "bailian", str(trace), "--out", str(tmp_path / "bl.jsonl"), "--tokenizer", sim.url]) == 0
    ids = [tokenize_text(orjson.loads(x)["prompt"]) for x in (tmp_path / "bl.jsonl").read_bytes().splitlines()]
    assert [len(t) for t in ids] == [40, 70]
    assert ids[1][:32] == ids[0][:32] and ids[1][32] != ids[0][32]


def test_chat_blocks_count_the_template(sim):
    tok = open_tokenizer(sim.url)
    blocks = TokenBlocks(tok, B, chat=True)
    # the simulator's template: <|im_start|> "user" "\n" before the content; after it <|im_end|> "\n"
    # <|im_start|> "assist" "ant" "\n" (letters in chunks of 6)
    assert blocks.describe() == {"vocabulary": 256, "head_tokens": 3, "tail_tokens": 6}
    text = blocks.prompt((0, 1, 2), 40)
    blocks.check(text, 40, "line 1")
    with pytest.raises(ConfigError, match=r"line 9: the prompt is 41 tokens in this tokenizer, not input_length 40"):
        blocks.check(text + " x", 40, "line 9")
