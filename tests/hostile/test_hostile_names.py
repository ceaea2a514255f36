"""Issue 30 item 7: a capture's name with a newline, quote, backslash or control character keeps its plan TOML valid.

``kvreplay record --out NAME`` and ``kvreplay import har|openai-batch|mooncake --out NAME``
write ``NAME.plan.toml`` naming ``NAME``; the plan is loaded back with the project's own
plan reader and must name the folder exactly. A name that is not UTF-8 (a lone
surrogate: no TOML can hold it) is refused with exit 2 before anything is written.
"""

from __future__ import annotations

import json

import orjson
import pytest

from kvreplay.cli import main
from kvreplay.plan import load_plan_toml
from kvreplay.workload.capture import CaptureWriter, sidecar_paths, toml_comment, toml_str

NAMES = ["new\nline", 'quo"te', "back\\slash", "tab\tand\x01ctl\x7f", 'all\n"\\\r\x1b[31m', "é ünïcode"]
BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "q"}]})


@pytest.mark.parametrize("name", NAMES)
def test_record_writer_plan_names_the_folder_exactly(tmp_path, name):
    w = CaptureWriter(tmp_path / name)
    slot = w.admit("POST", "/v1/chat/completions", BODY, 0)
    w.complete(slot, status=200, outcome="complete")
    w.close(comment=f"kvreplay record {name}")
    _, plan = sidecar_paths(tmp_path / name)
    specs, doc = load_plan_toml(plan)
    assert doc["workload"] == str(tmp_path / name)
    assert specs[0].arrival == "trace:" + str(sidecar_paths(tmp_path / name)[0])
    first = plan.read_text().splitlines()[0]
    assert first.startswith("# kvreplay record ") and "\n" not in first


@pytest.mark.parametrize("name", NAMES[:3])
def test_import_commands_write_a_loadable_plan(tmp_path, name, capsys):
    src = tmp_path / f"in{name}.jsonl"
    src.write_bytes(b'{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":' + BODY + b"}\n")
    assert main(["import", "openai-batch", str(src), "--out", str(tmp_path / name)]) == 0
    _, doc = load_plan_toml(sidecar_paths(tmp_path / name)[1])
    assert doc["workload"] == str(tmp_path / name)
    trace = tmp_path / f"t{name}.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}) + "\n")
    out = tmp_path / f"mc{name}"
    assert main(["import", "mooncake", str(trace), "--out", str(out)]) == 0
    _, doc = load_plan_toml(out.with_name(out.name + ".plan.toml"))
    assert doc["workload"] == str(out) + ".jsonl"
    capsys.readouterr()


def test_a_name_no_toml_can_hold_is_refused_before_anything_is_written(tmp_path, capsys):
    bad = str(tmp_path / "x\udcff")
    assert main(["record", "--upstream", "http://127.0.0.1:9", "--out", bad, "--duration", "0.01"]) == 2
    err = capsys.readouterr().err
    assert "field '--out'" in err and "not UTF-8" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_escapes():
    assert toml_str('a"b\\c\nd\x7f') == '"a\\"b\\\\c\\u000Ad\\u007F"'
    assert toml_comment("x\ny\tz\x1b") == "x\\x0ay\tz\\x1b"
