"""Gaps left by issue 17 (docs/reliability.md): the run directory's first writes, credentials in
``ab``/``probe`` target URLs, short secrets."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from hostile.harness import make_workload
from hostile.server import HostileServer

from kvreplay.cli import main


@pytest.fixture()
def workload(tmp_path: Path) -> Path:
    return make_workload(tmp_path / "wl")


def _base(workload: Path, url: str, out: Path) -> list[str]:
    return ["run", str(workload), "--target", url, "--backend", "none", "--phase", "p:forward:c1",
            "--out", str(out), "--quiet"]


# -- 2a: a full disk or a permission error at the first write -----------------------------------


@pytest.mark.parametrize("err, words", [
    (errno.ENOSPC, "No space left on device"),
    (errno.EACCES, "Permission denied"),
])
def test_plan_json_not_writable_is_one_line_and_exit_2_nothing_sent(workload, tmp_path, capsys, monkeypatch,
                                                                     err, words):
    from kvreplay.runner import _runner

    real = _runner.atomic_write_bytes

    def failing(path, data):
        if path.name == "plan.json":
            raise OSError(err, words, str(path) + ".tmp")
        return real(path, data)

    monkeypatch.setattr(_runner, "atomic_write_bytes", failing)
    out = tmp_path / "run"
    with HostileServer("ok") as srv:
        code = main(_base(workload, srv.url, out))
        sent = srv.requests
    cap = capsys.readouterr()
    assert code == 2
    assert cap.err == f"kvreplay: error: {out}, field '--out': cannot write plan.json: {words}; nothing was sent\n"
    assert cap.out == ""
    assert sent == 0
    assert (out / "records.jsonl").read_bytes() == b""


def test_records_jsonl_not_creatable_is_one_line_and_exit_2(workload, tmp_path, capsys, monkeypatch):
    from kvreplay.runner import _runner

    def full(path, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(_runner, "open_new", full)
    out = tmp_path / "run"
    with HostileServer("ok") as srv:
        code = main(_base(workload, srv.url, out))
        sent = srv.requests
    cap = capsys.readouterr()
    assert code == 2
    assert cap.err == (f"kvreplay: error: {out}, field '--out': cannot create records.jsonl: "
                       "No space left on device; nothing was sent\n")
    assert sent == 0 and not (out / "plan.json").exists()
