"""Issue 44 item 6: ``--out`` never clobbers (``kvreplay.outpath.check_out``).

Before: ``import`` and ``export`` replaced whatever was at ``--out`` (an unrelated file,
the import's own source, a device node through the atomic rename), and ``export --out``
a folder or under a missing folder, ``import --out`` under a file, were tracebacks.
Each case: exit 2 with one line naming ``--out`` and the path, and nothing changed.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from kvreplay.cli import main
from kvreplay.errors import ConfigError
from kvreplay.outpath import check_out

CONV = [{"id": "c", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"},
                                      {"from": "human", "value": "again"}]}]


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "s.json"
    src.write_bytes(orjson.dumps(CONV))
    return src


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err and cap.err.count("\n") == 1, cap.err
    return cap.err


def test_import_refuses_an_existing_file_unless_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out = _source(tmp_path), tmp_path / "w.jsonl"
    out.write_text("unrelated\n")
    assert main(["import", "sharegpt", str(src), "--out", str(out)]) == 2
    assert _one_error(capsys) == f"kvreplay: error: {out}, field '--out': exists; give --force to replace it\n"
    assert out.read_text() == "unrelated\n"
    assert main(["import", "sharegpt", str(src), "--out", str(out), "--force"]) == 0  # the behaviour before
    assert out.read_bytes().count(b"\n") == 2


def test_import_refuses_a_side_file_beside_it_unless_force(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    src, side = _source(tmp_path), tmp_path / "w.sessions.jsonl"
    side.write_text("mine\n")
    assert main(["import", "sharegpt", str(src), "--out", str(tmp_path / "w")]) == 2
    assert _one_error(capsys) == f"kvreplay: error: {side}, field '--out': exists; give --force to replace it\n"
    assert side.read_text() == "mine\n" and not (tmp_path / "w.jsonl").exists()


def test_import_never_overwrites_its_own_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "t.jsonl"
    src.write_bytes(b'{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": [1]}\n')
    before = src.read_bytes()
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(src)
    for out in (src, alias):
        assert main(["import", "mooncake", str(src), "--out", str(out), "--block-tokens", "4", "--force"]) == 2
        assert _one_error(capsys) == (f"kvreplay: error: {out}, field '--out': is this command's own input; "
                                      "choose another path\n")
    assert src.read_bytes() == before


def test_a_fifo_or_a_link_to_a_device_is_never_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _source(tmp_path)
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    dev = tmp_path / "d.jsonl"
    dev.symlink_to("/dev/null")  # never /dev/null itself: a wrong answer would replace the node
    for out, what in ((fifo, "a FIFO"), (dev, "a character device")):
        assert main(["import", "sharegpt", str(src), "--out", str(out), "--force"]) == 2
        assert _one_error(capsys) == (f"kvreplay: error: {out}, field '--out': is {what}, not a file kvreplay may "
                                      "write\n")
    assert fifo.is_fifo() and dev.is_symlink()


def test_import_under_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, f = _source(tmp_path), tmp_path / "plain"
    f.write_text("x")
    assert main(["import", "sharegpt", str(src), "--out", str(f / "sub" / "w.jsonl")]) == 2
    assert _one_error(capsys) == f"kvreplay: error: {f / 'sub' / 'w.jsonl'}, field '--out': {f} is not a folder\n"
    # a missing folder is created, as the docs' `--out runs/mc` does
    assert main(["import", "sharegpt", str(src), "--out", str(tmp_path / "new" / "w.jsonl")]) == 0


def test_export_refuses_clobbering_a_folder_a_missing_parent_and_the_workload(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _source(tmp_path)
    wl = tmp_path / "w.jsonl"
    assert main(["import", "sharegpt", str(src), "--out", str(wl)]) == 0
    capsys.readouterr()
    cases = [
        (tmp_path, "is a folder; give a file path"),
        (tmp_path / "no" / "x.jsonl", f"its folder {tmp_path / 'no'} does not exist (create it first)"),
        (wl, "is this command's own input; choose another path"),
        (tmp_path / "w.sessions.jsonl", "is this command's own input; choose another path"),
    ]
    for out, why in cases:
        assert main(["export", "vllm", str(wl), "--out", str(out), "--force"]) == 2
        assert _one_error(capsys) == f"kvreplay: error: {out}, field '--out': {why}\n"
    dst = tmp_path / "v.jsonl"
    dst.write_text("mine\n")
    assert main(["export", "vllm", str(wl), "--out", str(dst)]) == 2
    assert _one_error(capsys) == f"kvreplay: error: {dst}, field '--out': exists; give --force to replace it\n"
    assert dst.read_text() == "mine\n"
    assert main(["export", "vllm", str(wl), "--out", str(dst), "--force", "--lossy"]) == 0
    assert dst.read_text() != "mine\n"


def test_record_refuses_the_plan_beside_its_folder_and_a_bad_duration(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cap.plan.toml").write_text("# mine\n")
    base = ["record", "--upstream", "http://127.0.0.1:9"]
    assert main([*base, "--out", str(tmp_path / "cap"), "--duration", "0.01"]) == 2
    assert _one_error(capsys) == (f"kvreplay: error: {tmp_path / 'cap.plan.toml'}, field '--out': exists; give "
                                  "--force to replace it\n")
    assert (tmp_path / "cap.plan.toml").read_text() == "# mine\n" and not (tmp_path / "cap").exists()
    for bad in ("nan", "-5", "0", "inf"):
        with pytest.raises(SystemExit) as exc:
            main([*base, "--out", str(tmp_path / "x"), "--duration", bad])
        assert exc.value.code == 2
        assert f"argument --duration: expected a number > 0 (s), got {bad!r}" in capsys.readouterr().err


def test_check_out_is_the_one_helper(tmp_path: Path) -> None:
    """The rules in one place (for synth, sweep and any new command): a folder output accepts an empty folder."""
    (tmp_path / "empty").mkdir()
    assert check_out(tmp_path / "empty", folder=True) == tmp_path / "empty"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(ConfigError, match="exists and is not an empty folder"):
        check_out(tmp_path / "full", folder=True, force=True)
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="a dangling symlink"):
        check_out(tmp_path / "gone")
    assert check_out(tmp_path / "gone", force=True) == tmp_path / "gone"


@pytest.mark.parametrize("kind", ["fifo", "urandom", "folder", "loop", "dangling"])
def test_an_unreadable_sessions_file_is_an_error_naming_it(tmp_path: Path, kind: str) -> None:
    """Before: ``is_file()`` was False for each, so a conversation run silently became a flat one."""
    from kvreplay.errors import WorkloadError
    from kvreplay.workload.sessions import load_sessions

    wl = tmp_path / "w.jsonl"
    wl.write_bytes(b'{"model": "m", "prompt": "p"}\n')
    side = tmp_path / "w.sessions.jsonl"
    if kind == "fifo":
        os.mkfifo(side)
    elif kind == "urandom":
        side.symlink_to("/dev/urandom")
    elif kind == "folder":
        side.mkdir()
    elif kind == "loop":
        side.symlink_to(side)
    else:
        side.symlink_to(tmp_path / "nowhere")
    why = {"fifo": "is a FIFO, not a regular file", "urandom": "is a device, not a regular file",
           "folder": "is a folder, not a regular file", "loop": "cannot be read: Too many levels of symbolic links",
           "dangling": "is a symlink to nothing"}[kind]
    with pytest.raises(WorkloadError) as exc:
        load_sessions(wl, 1)
    assert str(exc.value) == f"{side}: session file {why}; remove it for a run without sessions"
    assert load_sessions(tmp_path / "absent.jsonl", 1) is None  # nothing there: a flat workload, as before


@pytest.mark.parametrize(("options", "field", "msg"), [
    ({"max_tokens": -1}, "max_tokens", "-1: "),
    ({"max_tokens": 2.5}, "max_tokens", "2.5: "),
    ({"think_time": -5}, "think_time", "-5: "),
    ({"think_time": float("nan")}, "think_time", "nan: "),
    ({"limit": "ten"}, "limit", "'ten': expected a whole number >= 1"),
    ({"limit": True}, "limit", "must be a number, not True"),
    ({"model": 3}, "model", "must be a string, not 3"),
    ({"chat": "yes"}, "chat", "must be True or False, not 'yes'"),
    ({"force": 1}, "force", "must be True or False, not 1"),
])
def test_the_import_api_checks_keywords_as_the_cli_checks_flags(tmp_path: Path, options: dict, field: str,
                                                                msg: str) -> None:
    """Issue 44 item 9: before, these were accepted (or a raw TypeError deep in the importer)."""
    import kvreplay

    with pytest.raises(ConfigError) as exc:
        kvreplay.import_workload("sharegpt", _source(tmp_path), tmp_path / "w.jsonl", **options)
    assert exc.value.field == field and exc.value.message.startswith(msg), exc.value
    assert not (tmp_path / "w.jsonl").exists()


def test_the_export_api_checks_its_keywords(tmp_path: Path) -> None:
    import kvreplay

    for kw, field in (({"aiperf_type": "multi"}, "aiperf_type"), ({"lossy": "yes"}, "lossy"),
                      ({"force": None}, "force")):
        with pytest.raises(ConfigError) as exc:
            kvreplay.export_workload("aiperf", tmp_path / "w.jsonl", tmp_path / "o.jsonl", **kw)
        assert exc.value.field == field


def test_force_replaces_a_link_at_out_never_its_target(tmp_path: Path) -> None:
    src = tmp_path / "t.jsonl"
    src.write_bytes(b'{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": [1]}\n')
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (tmp_path / "w.jsonl").symlink_to(victim)
    assert main(["import", "mooncake", str(src), "--out", str(tmp_path / "w.jsonl"), "--block-tokens", "4",
                 "--force"]) == 0
    assert victim.read_text() == "keep me\n"  # before: open(W, "wb") wrote through the link
    assert not (tmp_path / "w.jsonl").is_symlink() and (tmp_path / "w.jsonl").read_bytes().count(b"\n") == 1
