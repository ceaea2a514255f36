"""``kvreplay synth`` against the embedded simulator (issue 46's Done-when, on a radix cache at time scale 0).

20 completion bodies of exactly 700 prompt tokens and 16 output tokens, a 300-token prefix
in each of 2 groups (requests dealt in turn: even bodies group 0, odd bodies group 1),
sized through serve-sim's ``/tokenize`` and ``/detokenize``. Replayed once at C1 on the
radix cache (16-token blocks; a lookup reuses at most ``(n - 1) // 16`` blocks): a
leader shares nothing (cached 0), a non-leader reuses floor(300 / 16) = 18 blocks = 288
tokens: 96% of its prefix, and not more than 304 (the prefix rounded up to a block).
"""

from __future__ import annotations

import hashlib

import orjson
import pytest

import kvreplay
from kvreplay.cli import main
from kvreplay.rundir.load import open_run
from kvreplay.sim.tokenizer import tokenize_text

ARGS = ["--requests", "20", "--isl", "700", "--osl", "16", "--prefix-tokens", "300", "--prefix-groups", "2"]


@pytest.fixture
def sim():
    with kvreplay.serve_sim(time_scale=0, cache="radix") as served:
        yield served


def test_done_when_exact_lengths_and_designed_prefix_reuse(tmp_path, sim, capsys):
    out = tmp_path / "w.jsonl"
    assert main(["synth", "--tokenizer", sim.url, "--out", str(out), *ARGS, "--check"]) == 0
    printed = capsys.readouterr().out
    bodies = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(bodies) == 20
    for b in bodies:
        assert len(tokenize_text(b["prompt"])) == 700  # the simulator's own tokenizer, in process
        assert (b["max_tokens"], b["min_tokens"], b["ignore_eos"]) == (16, 16, True)
        assert b["stream"] is True and b["stream_options"] == {"include_usage": True}
        assert b["model"] == "kvreplay-sim"
        assert len(set(tokenize_text(b["prompt"]))) > 100  # not one token repeated
    ids = [tokenize_text(b["prompt"]) for b in bodies]
    for i in range(2, 20):  # every group member begins with its leader's 300 tokens, and only those
        assert ids[i][:300] == ids[i % 2][:300]
    assert len({t[300] for t in ids[0::2]}) == 10 and len({t[300] for t in ids[1::2]}) == 10
    assert ids[0][0] != ids[1][0]
    records = sorted(open_run(tmp_path / "w.check").iter_records(), key=lambda r: r["body_index"])
    assert [r["body_index"] for r in records] == list(range(20))
    for r in records:
        assert (r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"]) == (700, 16)
        assert r["usage"]["cached_tokens"] == (0 if r["body_index"] < 2 else 288)
    assert "  0            10             2700    2592" in printed
    assert "  1            10             2700    2592" in printed
    assert "every body's usage equals its designed prompt and output tokens" in printed
    assert "  2 prefix groups of 300 tokens; every prompt starts with " in printed
    manifest = orjson.loads((tmp_path / "w.synth.json").read_bytes())
    assert manifest["workload_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert [(g["group"], g["leader"], g["members"], g["prefix_tokens"]) for g in manifest["groups"]] == [
        (0, 0, 10, 300), (1, 1, 10, 300)]
    assert [r["shared_tokens"] for r in manifest["bodies"]] == [0, 0] + [300] * 18
    assert manifest["tokenizer"]["dialect"] == "sim" and len(manifest["tokenizer"]["fingerprint"]) == 64
    # the same seed and tokenizer write the same bytes; another seed other bytes
    again = tmp_path / "again.jsonl"
    assert main(["synth", "--tokenizer", sim.url, "--out", str(again), *ARGS]) == 0
    assert again.read_bytes() == out.read_bytes()
    in_process = tmp_path / "in_process.jsonl"  # --tokenizer sim: the same ids without a server
    assert main(["synth", "--tokenizer", "sim", "--out", str(in_process), *ARGS]) == 0
    assert in_process.read_bytes() == out.read_bytes()
    other = tmp_path / "other.jsonl"
    assert main(["synth", "--tokenizer", sim.url, "--out", str(other), *ARGS, "--seed", "1"]) == 0
    assert other.read_bytes() != out.read_bytes()
    one = tmp_path / "one.jsonl"  # one group: the count's noun in the singular
    capsys.readouterr()
    assert main(["synth", "--tokenizer", "sim", "--out", str(one), *ARGS[:-1], "1"]) == 0
    assert "  1 prefix group of 300 tokens; every prompt starts with " in capsys.readouterr().out


def test_out_refused_without_force_and_credentials_redacted(tmp_path, sim, capsys):
    out = tmp_path / "w.jsonl"
    out.write_bytes(b"old\n")
    assert main(["synth", "--tokenizer", sim.url, "--out", str(out), "--requests", "2"]) == 2
    assert "exists; give --force" in capsys.readouterr().err and out.read_bytes() == b"old\n"
    url = sim.url.replace("http://", "http://user:hunter22pw@")
    assert main(["synth", "--tokenizer", url, "--out", str(out), "--requests", "2", "--isl", "40", "--osl", "4",
                 "--force"]) == 0
    shown = capsys.readouterr()
    for text in (shown.out, shown.err, (tmp_path / "w.synth.json").read_text(), out.read_text()):
        assert "hunter22pw" not in text
    assert orjson.loads((tmp_path / "w.synth.json").read_bytes())["tokenizer"]["source"].startswith(
        "http://[REDACTED]@")


def test_chat_conversations_exact_and_sessions_written(tmp_path, sim):
    out = tmp_path / "c.jsonl"
    assert main(["synth", "--tokenizer", sim.url, "--out", str(out), "--api", "chat", "--requests", "2",
                 "--isl", "120", "--osl", "8", "--prefix-tokens", "40", "--turns", "3", "--think-time", "1.5"]) == 0
    from kvreplay.sim.tokenizer import render_body
    from kvreplay.workload.sessions import load_sessions

    bodies = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    rows = orjson.loads((tmp_path / "c.synth.json").read_bytes())["bodies"]
    prompts = [render_body(b).tokens for b in bodies]
    assert [len(p) for p in prompts] == [r["prompt_tokens"] for r in rows]
    assert [len(prompts[k]) for k in (0, 3)] == [120, 120]
    for s in (0, 3):  # turn k+1 = turn k's prompt + an 8-token answer + (120 - 40) own tokens
        assert len(prompts[s + 1]) == 120 + 8 + 80 and len(prompts[s + 2]) == 208 + 8 + 80
        assert prompts[s + 1][:120] == prompts[s] and prompts[s + 2][:208] == prompts[s + 1]
    assert prompts[3][:40] == prompts[0][:40] and prompts[3][40] != prompts[0][40]  # one group of 40
    sessions = load_sessions(out, 6)
    assert sessions is not None
    assert [(t.session, t.turn, t.think_time_s) for t in sessions.turns] == [
        ("s00000", 0, 0.0), ("s00000", 1, 1.5), ("s00000", 2, 1.5),
        ("s00001", 0, 0.0), ("s00001", 1, 1.5), ("s00001", 2, 1.5)]


def test_check_on_the_embedded_simulator(tmp_path, capsys):
    out = tmp_path / "w.jsonl"
    assert main(["synth", "--tokenizer", "sim", "--out", str(out), "--requests", "6", "--isl", "100", "--osl", "4",
                 "--prefix-tokens", "40", "--prefix-share", "0.5", "--check", "sim"]) == 0
    printed = capsys.readouterr().out
    rows = orjson.loads((tmp_path / "w.synth.json").read_bytes())["bodies"]
    # 3 of 6 requests share (round(0.5 * 6)), all in group 0: a leader and two members of 40 tokens
    assert sorted(r["shared_tokens"] for r in rows if r["group"] == 0) == [0, 40, 40]
    assert [r["shared_tokens"] for r in rows if r["group"] is None] == [0, 0, 0]  # no BOS in the simulator
    assert "  0             3               80      64" in printed  # 2 x floor(40 / 16) blocks of 16
    assert "  -             3                0       0" in printed
    before = out.read_bytes()
    assert main(["synth", "--tokenizer", "sim", "--out", str(out), "--requests", "2", "--force", "--check", "sim"]) == 2
    assert "--check-out " + str(tmp_path / "w.check") + " exists" in capsys.readouterr().err
    assert out.read_bytes() == before  # refused before anything is written


def test_out_is_checked_as_every_command_checks_it(tmp_path, capsys):
    """Issue 44 item 6: synth's --out goes through the one check (kvreplay.outpath.check_out), before any
    tokenizer request: a FIFO is never replaced, even with --force; nor the histogram it reads; nor a
    manifest left beside the workload without --force."""
    import os

    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    assert main(["synth", "--tokenizer", "sim", "--out", str(fifo), "--requests", "2", "--force"]) == 2
    assert "--out" in capsys.readouterr().err
    hist = tmp_path / "isl.jsonl"
    hist.write_text('{"tokens": 40, "count": 1}\n')
    assert main(["synth", "--tokenizer", "sim", "--out", str(hist), "--isl-file", str(hist), "--requests", "2",
                 "--force"]) == 2
    assert hist.read_text() == '{"tokens": 40, "count": 1}\n'
    capsys.readouterr()
    out = tmp_path / "w.jsonl"
    (tmp_path / "w.synth.json").write_text("{}")
    assert main(["synth", "--tokenizer", "sim", "--out", str(out), "--requests", "2"]) == 2
    assert "w.synth.json" in capsys.readouterr().err and not out.exists()
