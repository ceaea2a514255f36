"""kvreplay.safe_io, the output sink: redaction, control escaping, atomic writes, lossless JSON (issue 26, item 3)."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreplay import redaction as R
from kvreplay import safe_io as S

KEY = "sk-sink-4f2a9c7e1b3d5a60-QZ"
SRC = Path(__file__).resolve().parents[2] / "src" / "kvreplay"


@pytest.fixture(autouse=True)
def _clean():
    R.clear()
    yield
    R.clear()


# -- JSON ----------------------------------------------------------------------------------------


def test_integers_outside_64_bits_are_written_as_their_decimal_string(tmp_path):
    p = tmp_path / "x.json"
    S.atomic_write_json(p, {"big": 2**70, "low": -(2**63) - 1, "u64max": 2**64 - 1, "i64min": -(2**63),
                            "nested": [[2**64]], 2**65: True})
    assert p.read_bytes() == (b'{\n  "big": "1180591620717411303424",\n  "low": "-9223372036854775809",\n'
                              b'  "u64max": 18446744073709551615,\n  "i64min": -9223372036854775808,\n'
                              b'  "nested": [\n    [\n      "18446744073709551616"\n    ]\n  ],\n'
                              b'  "36893488147419103232": true\n}\n')


def test_del_and_c1_become_u_escapes_and_decode_back(tmp_path):
    p = tmp_path / "x.json"
    S.atomic_write_json(p, ["a\x9b[31mb\x7fc\x85", "é\u00a0"])
    raw = p.read_bytes()
    assert raw == '[\n  "a\\u009b[31mb\\u007fc\\u0085",\n  "é\u00a0"\n]\n'.encode()
    assert orjson.loads(raw) == ["a\x9b[31mb\x7fc\x85", "é\u00a0"]


def test_a_secret_needing_json_escapes_is_redacted_in_keys_and_values(tmp_path):
    secret = 'k"ey\\with-quote'
    R.register(secret)
    p = tmp_path / "x.json"
    S.atomic_write_json(p, {secret: f"echo {secret}!", "n": [1, 2]})
    assert orjson.loads(p.read_bytes()) == {"[REDACTED]": "echo [REDACTED]!", "n": [1, 2]}
    assert b"ey\\\\with" not in p.read_bytes() and b"ey\\with" not in p.read_bytes()


def test_a_digit_secret_does_not_rewrite_numbers(tmp_path):
    R.register("4096")
    p = tmp_path / "x.json"
    S.atomic_write_json(p, {"max_tokens": 4096, "note": "limit 4096"})
    assert orjson.loads(p.read_bytes()) == {"max_tokens": 4096, "note": "limit [REDACTED]"}


def _expected(v):
    """The value a reader gets back: secrets replaced, integers outside 64 bits as decimal strings."""
    if isinstance(v, str):
        return v.replace(KEY, "[REDACTED]")
    if isinstance(v, bool) or v is None or isinstance(v, float):
        return v
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**64 else str(v)
    if isinstance(v, dict):
        return {_expected(k): _expected(x) for k, x in v.items()}
    return [_expected(x) for x in v]


_text = st.text(alphabet=st.one_of(st.characters(codec="utf-8", exclude_categories=("Cs",)),
                                   st.sampled_from(["\x00", "\x1b", "\x7f", "\x9b", "\x85", "\n", "\r", '"', "\\"])),
                max_size=12)
_strings = st.one_of(_text, st.builds(lambda a, b: a + KEY + b, _text, _text))
_ints = st.one_of(st.integers(min_value=-(2**63), max_value=2**64 - 1), st.integers(min_value=2**64),
                  st.integers(max_value=-(2**63) - 1), st.sampled_from([2**64, 2**64 - 1, -(2**63), -(2**63) - 1]))
_json = st.recursive(
    st.one_of(st.none(), st.booleans(), _ints, st.floats(allow_nan=False, allow_infinity=False), _strings),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_strings, inner, max_size=4)),
    max_leaves=25)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_json)
def test_any_json_value_round_trips_without_the_secret(tmp_path, value):
    R.clear()
    R.register(KEY)
    p = tmp_path / "v.json"
    S.atomic_write_json(p, value)
    raw = p.read_bytes()
    assert raw.endswith(b"\n")
    assert KEY.encode() not in raw
    assert not re.search(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]", raw)  # only LF; no raw DEL/C1
    expected = _expected(value)
    if isinstance(value, dict) and len(expected) != len(value):
        return  # two keys that differ only by the secret fold into one: nothing more to compare
    assert orjson.loads(raw) == expected
    # The JSON Lines appender writes the same value compactly, one line.
    with S.open_jsonl(tmp_path / "v.jsonl") as f:
        f.write(value)
    lines = (tmp_path / "v.jsonl").read_bytes().split(b"\n")
    (tmp_path / "v.jsonl").unlink()
    assert lines[1:] == [b""] and orjson.loads(lines[0]) == expected


def test_an_unserializable_value_still_raises_with_a_secret_registered(tmp_path):
    R.register(KEY)
    with pytest.raises(TypeError):
        S.atomic_write_json(tmp_path / "x.json", {"s": {1, 2}})
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "x.json.tmp").exists()


# -- text, Markdown, HTML, terminal ----------------------------------------------------------------


def test_markdown_and_html_are_redacted_and_their_controls_escaped(tmp_path):
    R.register(KEY)
    text = f"| a | \x1b[31mred\x1b[0m {KEY} |\r\n\tok\x9b\x07\n"
    want = "| a | \\x1b[31mred\\x1b[0m [REDACTED] |\\x0d\n\tok\\x9b\\x07\n"
    S.write_markdown(tmp_path / "r.md", text)
    S.write_html(tmp_path / "r.html", text)
    assert (tmp_path / "r.md").read_text(encoding="utf-8") == want
    assert (tmp_path / "r.html").read_text(encoding="utf-8") == want


def test_atomic_write_text_redacts(tmp_path):
    R.register(KEY)
    S.atomic_write_text(tmp_path / "t.txt", f"key={KEY}\n")
    assert (tmp_path / "t.txt").read_text() == "key=[REDACTED]\n"


def test_echo_redacts_and_escapes_on_either_stream(capsys):
    R.register(KEY)
    S.echo(f"server said {KEY}\x1b]0;pwned\x07", "and", 3, err=True)
    S.echo("two\nlines\ttab\x1b[2J")
    cap = capsys.readouterr()
    assert cap.err == "server said [REDACTED]\\x1b]0;pwned\\x07 and 3\n"
    assert cap.out == "two\nlines\ttab\\x1b[2J\n"


# -- atomic, no symlink followed, synced ----------------------------------------------------------


def test_the_file_is_synced_before_the_rename_and_its_directory_after(tmp_path, monkeypatch):
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to name a descriptor")
    seen: list[str] = []
    real = os.fsync

    def spy(fd):
        target = os.readlink(f"/proc/self/fd/{fd}")
        seen.append(f"{Path(target).name}:{(tmp_path / 'a.json').exists()}")
        return real(fd)

    monkeypatch.setattr(S.os, "fsync", spy)
    S.atomic_write_json(tmp_path / "a.json", {"x": 1})
    assert seen == ["a.json.tmp:False", f"{tmp_path.name}:True"]


def test_jsonl_refuses_a_symlink_and_appends_redacted_lines(tmp_path):
    R.register(KEY)
    (tmp_path / "victim").write_text("precious\n")
    (tmp_path / "requests.jsonl").symlink_to(tmp_path / "victim")
    with pytest.raises(OSError) as err:
        S.open_jsonl(tmp_path / "requests.jsonl")
    assert err.value.errno == errno.ELOOP
    assert (tmp_path / "victim").read_text() == "precious\n"
    with S.open_jsonl(tmp_path / "ok.jsonl") as f:
        f.write({"error": f"bad key {KEY}", "n": 2**64})
        f.write([1])
    assert (tmp_path / "ok.jsonl").read_bytes() == b'{"error":"bad key [REDACTED]","n":"18446744073709551616"}\n[1]\n'


# -- one stylesheet ---------------------------------------------------------------------------------


def test_one_stylesheet_in_the_source():
    """Only report/html.py holds a <style> element or a CSS constant; every page takes it from there."""
    holders = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                     if re.search(r"<style|^_?CSS\s*=", p.read_text(encoding="utf-8"), re.M))
    assert holders == ["report/html.py"]


def test_the_experiment_and_ab_pages_use_the_shared_template():
    from kvreplay.experiments.publish import render_html
    from kvreplay.report.abreport import render_ab_html
    from kvreplay.report.html import CSS

    result = {"started": "s", "ended": "e", "experiment_sha256": "0" * 64, "identity": None, "aborted": None,
              "status": "complete", "step_counts": {}, "steps": [], "cells": [], "findings": [], "time": {},
              "left_running": None, "compare": {}, "tiers": {}}
    pages = [render_html(result, "w<1>"), render_ab_html(Path("d"), {"arms": []}, None)]
    for page in pages:
        assert page.startswith('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">\n<title>')
        assert page.count("<style>") == 1 and f"<style>{CSS}</style>" in page
        assert page.endswith("</body></html>\n")
    assert "<title>w&lt;1&gt;</title>" in pages[0]
