"""``kvreplay import sharegpt``: one session per conversation, one exact chat body per human turn."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from kvreplay.cli import main
from kvreplay.errors import WorkloadError
from kvreplay.workload.import_sharegpt import import_sharegpt
from kvreplay.workload.sessions import Turn, load_sessions

CORPUS = Path(__file__).parents[3] / "fixtures" / "conversations"

_TAIL = b',"max_tokens":256,"stream":true,"stream_options":{"include_usage":true}}'


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "src.json"
    p.write_text(text, encoding="utf-8")
    return p


def test_hand_made_file_exact_bodies_and_sessions(tmp_path: Path) -> None:
    src = _write(tmp_path, """[
      {"id": "a", "conversations": [
        {"from": "system", "value": "Be brief."},
        {"from": "human", "value": "Hi \\"there\\"\\n\u00e9"},
        {"from": "gpt", "value": "Hello."},
        {"from": "human", "value": "Bye"},
        {"from": "gpt", "value": "Ciao."}]},
      {"id": 7, "conversations": [{"from": "gpt", "value": "only a reply"}]},
      {"conversations": [{"from": "human", "value": "x"}]}
    ]""")
    res = import_sharegpt(src, tmp_path / "w")
    assert res.workload == tmp_path / "w.jsonl"
    assert (res.sessions, res.bodies, res.skipped) == (2, 3, {"no human message": 1})
    lines = res.workload.read_bytes().split(b"\n")
    assert lines[-1] == b""
    sys_ = b'{"role":"system","content":"Be brief."}'
    hi = '{"role":"user","content":"Hi \\"there\\"\\n\u00e9"}'.encode()
    assert lines[:3] == [
        b'{"model":"kvreplay-sim","messages":[' + sys_ + b"," + hi + b"]" + _TAIL,
        b'{"model":"kvreplay-sim","messages":[' + sys_ + b"," + hi + b',{"role":"assistant","content":"Hello."},'
        b'{"role":"user","content":"Bye"}]' + _TAIL,
        b'{"model":"kvreplay-sim","messages":[{"role":"user","content":"x"}]' + _TAIL,
    ]
    s = load_sessions(res.workload, 3)
    assert s is not None
    assert s.turns == (Turn(0, "a", 0, 0.0), Turn(1, "a", 1, 0.0), Turn(2, "#2", 0, 0.0))


def test_flags_set_model_max_tokens_and_think_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path, '[{"id":"c","conversations":[{"from":"human","value":"1"},{"from":"gpt","value":"2"},'
                           '{"from":"human","value":"3"}]}]')
    src.write_text(src.read_text()[:-1] + ',{"id":"d","conversations":[{"from":"human","value":"4"}]}]')
    rc = main(["import", "sharegpt", str(src), "--out", str(tmp_path / "w.jsonl"), "--model", "m1",
               "--max-tokens", "9", "--think-time", "1.5", "--limit", "1"])
    assert rc == 0
    first = orjson.loads((tmp_path / "w.jsonl").read_bytes().split(b"\n")[0])
    assert (first["model"], first["max_tokens"]) == ("m1", 9)
    assert (tmp_path / "w.sessions.jsonl").read_bytes() == (
        b'{"body":0,"session":"c","turn":0,"think_time_s":0.0}\n'
        b'{"body":1,"session":"c","turn":1,"think_time_s":1.5}\n')
    assert capsys.readouterr().out.startswith(f"1 sessions, 2 bodies -> {tmp_path / 'w.jsonl'}\n")


def test_corpus_conversation_matches_its_openai_messages_rendering(tmp_path: Path) -> None:
    # The corpus holds the axolotl ShareGPT conversation and, derived from it, one line per user
    # turn with the OpenAI messages prefix: the import must give exactly those messages.
    res = import_sharegpt(CORPUS / "axolotl_fixture_sharegpt_conversation.json", tmp_path / "w")
    want = [json.loads(x)["messages"] for x in
            (CORPUS / "sharegpt_minesweeper_openai_messages.jsonl").read_text().splitlines()]
    got = [orjson.loads(x)["messages"] for x in res.workload.read_bytes().splitlines()]
    assert len(want) == 6
    assert got == want
    s = load_sessions(res.workload, 6)
    assert s is not None and s.bodies == {"#0": (0, 1, 2, 3, 4, 5)}


@pytest.mark.parametrize(("text", "field", "msg"), [
    ('[{"id":"a","conversations":[{"from":"bot","value":"x"}]}]', "[0].conversations[0].from", "must be one of"),
    ('[{"id":"a","conversations":[{"from":"human"}]}]', "[0].conversations[0].value", "not a string"),
    ('[{"id":"a"}]', "[0].conversations", "not a list"),
    ('[{"id":"a","conversations":[]}, 3]', "[1]", "not an object"),
    ('[{"id":[],"conversations":[]}]', "[0].id", "non-empty string"),
    ('[{"id":"a","conversations":[{"from":"human","value":"x"}]},'
     '{"id":"a","conversations":[{"from":"human","value":"y"}]}]', "[1].id", "used twice"),
    ('[{"id":"a","conversations":[]}, {"id": }]', "[1]", "not JSON"),
])
def test_malformed_input_names_file_and_json_path(tmp_path: Path, text: str, field: str, msg: str) -> None:
    src = _write(tmp_path, text)
    with pytest.raises(WorkloadError, match=msg) as ei:
        import_sharegpt(src, tmp_path / "w")
    assert (ei.value.path, ei.value.field) == (src, field)
    assert list(tmp_path.iterdir()) == [src]  # nothing left behind


def test_not_an_array_and_empty(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="not a JSON array"):
        import_sharegpt(_write(tmp_path, '"x"'), tmp_path / "w")
    with pytest.raises(WorkloadError, match="bytes after"):
        import_sharegpt(_write(tmp_path, '[] x'), tmp_path / "w")
    with pytest.raises(WorkloadError, match="no conversation with a human"):
        import_sharegpt(_write(tmp_path, '[]'), tmp_path / "w")


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_the_array_is_read_in_chunks_across_any_boundary(tmp_path: Path, chunk: int) -> None:
    from kvreplay.workload.conversation import iter_json_array

    doc = [{"id": str(i), "conversations": [{"from": "human", "value": "\\\"x]}" * i + "é"}]} for i in range(30)]
    doc += [3, "s", [1, [2]], {"a": "}"}, 1.5e3]
    p = tmp_path / "a.json"
    p.write_text("  [ " + " ,\n ".join(json.dumps(x, ensure_ascii=False) for x in doc) + " ]\n ", encoding="utf-8")
    assert [x for _, x in iter_json_array(p, chunk_bytes=chunk)] == doc
    assert [i for i, _ in iter_json_array(p, chunk_bytes=chunk)] == list(range(len(doc)))
    p.write_text('[{"a": 1}, {"b": ')
    with pytest.raises(WorkloadError, match="not JSON") as ei:
        list(iter_json_array(p, chunk_bytes=chunk))
    assert ei.value.field == "[1]"
