"""Issue 17: bad input is exit 2 naming file/line/field; resources, disk full, client errors, output safety.

Each test drives ``kvreplay run`` (in a subprocess where a resource limit must
apply to the client alone, else in-process through ``kvreplay.cli.main``)
against ``hostile.server.HostileServer`` on 127.0.0.1.
"""

from __future__ import annotations

import errno
import hashlib
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hostile.harness import KEY, N_BODIES, leaked, make_workload, run_case
from hostile.server import HostileServer

from kvreplay.cli import main


@pytest.fixture()
def workload(tmp_path: Path) -> Path:
    return make_workload(tmp_path / "wl")


def _main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out + cap.err


def _base(workload: Path, url: str, out: Path, *extra: str) -> list[str]:
    return ["run", str(workload), "--target", url, "--backend", "none", "--phase", "p:forward:c1",
            "--out", str(out), "--quiet", *extra]


# -- secrets ------------------------------------------------------------------------------------


def test_key_file_with_a_newline_inside_is_exit_2_and_never_sent(workload, tmp_path, capsys):
    kf = tmp_path / "key"
    kf.write_text(f"  {KEY}\nX-Injected: yes\n")
    with HostileServer("ok") as srv:
        code, text = _main(_base(workload, srv.url, tmp_path / "run", "--api-key-file", str(kf)), capsys)
        sent = srv.requests
    assert code == 2
    assert "--api-key-file: control character (code 10) at offset 37" in text
    assert KEY not in text and "Injected" not in text
    assert sent == 0


def test_key_file_whitespace_is_stripped(workload, tmp_path, capsys):
    kf = tmp_path / "key"
    kf.write_text(f"\n  {KEY}  \n")
    with HostileServer("key_echo_sse_error") as srv:
        code, text = _main(_base(workload, srv.url, tmp_path / "run", "--api-key-file", str(kf)), capsys)
    assert code == 0
    recs = [orjson.loads(ln) for ln in (tmp_path / "run" / "records.jsonl").read_bytes().splitlines()]
    # the server saw exactly "Bearer KEY" (stripped) and echoed it; the record holds the marker
    assert [r["error"] for r in recs] == ["upstream said [REDACTED]"] * N_BODIES


def test_url_credentials_become_a_header_and_are_redacted(workload, tmp_path):
    with HostileServer("key_echo_401") as srv:
        url = srv.url.replace("http://", "http://alice:s3cret-pass-9@")
        res = run_case(url, workload, tmp_path / "run", 1, key="", extra=["--api-key-env", "NO_SUCH_VAR_17"])
    assert res.code == 2  # an unset key variable is bad input, before anything is sent
    with HostileServer("key_echo_401") as srv:
        url = srv.url.replace("http://", "http://alice:s3cret-pass-9@")
        out = tmp_path / "run2"
        env = {**os.environ, "MPLBACKEND": "Agg"}
        p = subprocess.run([sys.executable, "-m", "kvreplay", "run", str(workload), "--target", url,
                            "--backend", "none", "--phase", "p:forward:c1", "--out", str(out)],
                           capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 3  # HTTP 401 aborts
    plan = orjson.loads((out / "plan.json").read_bytes())
    assert plan["run"]["target"] == f"http://[REDACTED]@127.0.0.1:{url.rsplit(':', 1)[1]}"
    recs = [orjson.loads(ln) for ln in (out / "records.jsonl").read_bytes().splitlines()]
    assert recs[0]["error"] == "bad key: [REDACTED]"
    for f in out.rglob("*"):
        if f.is_file():
            assert b"s3cret-pass-9" not in f.read_bytes(), f
    assert "s3cret-pass-9" not in p.stdout + p.stderr


# -- bad input: exit 2 with file, line, field -----------------------------------------------------


@pytest.mark.parametrize("phase, words", [
    ("p:forward:c1000000000", "field '--phase.concurrency': must be at most 100000, not 1000000000"),
    ("p:forward:c1:x100000000", "field '--phase.repeats': must be at most 10000000, not 100000000"),
    ("p:forward:c1:x5000000", "phase p: 4 bodies x 5000000 repeats takes the plan over 10000000 positions"),
    ("p:forward:c1:r0.0000001",
     "field '--phase.rate': an open loop needs a finite rate in [0.001, 1e+06] (requests/s), not 1e-07"),
])
def test_nonsense_phases_are_exit_2(workload, tmp_path, capsys, phase, words):
    code, text = _main(["run", str(workload), "--phase", phase, "--out", str(tmp_path / "r"), "--quiet"], capsys)
    assert code == 2
    assert words in text


def test_nan_rate_in_a_toml_plan_names_file_line_field(workload, tmp_path, capsys):
    plan = tmp_path / "plan.toml"
    plan.write_text('[[phase]]\nname = "a"\nconcurrency = 1\n\n[[phase]]\nname = "b"\nconcurrency = 2\n'
                    'arrival = "constant"\nrate = nan\n')
    code, text = _main(["run", str(workload), "--plan", str(plan), "--out", str(tmp_path / "r"), "--quiet"], capsys)
    assert code == 2
    assert (f"{plan}:5, field 'phase[1].rate': an open loop needs a finite rate in [0.001, 1e+06] (requests/s), "
            "not nan") in text


def _crafted_plan(tmp_path: Path, workload: Path, edit) -> Path:
    with HostileServer("ok") as srv:
        res = run_case(srv.url, workload, tmp_path / "orig", 1)
    assert res.code == 0
    data = orjson.loads((tmp_path / "orig" / "plan.json").read_bytes())
    edit(data)
    content = {k: v for k, v in data.items() if k not in ("plan_sha256", "run")}
    data["plan_sha256"] = hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).hexdigest()
    p = tmp_path / "crafted.json"
    p.write_bytes(orjson.dumps(data))
    return p


@pytest.mark.parametrize("edit, words", [
    (lambda d: d["phases"][0]["sequence"][1].__setitem__("body_index", "x"),
     "field 'phases[0].sequence[1]': body_index, repetition or body_sha256 out of range"),
    (lambda d: d["phases"][0]["sequence"][0].__setitem__("repetition", 10**6),
     "field 'phases[0].sequence[0]': body_index, repetition or body_sha256 out of range"),
    (lambda d: d["workload"].__setitem__("n_bodies", 10**12),
     "field 'workload.n_bodies': n_bodies must be an integer in [1, 10000000]"),
    (lambda d: d["phases"][0].__setitem__("concurrency", 10**9),
     "field 'phases[0].concurrency': must be at most 100000, not 1000000000"),
    (lambda d: d["phases"][0].pop("sequence"), "malformed plan.json: KeyError: 'sequence'"),
])
def test_crafted_plan_json_is_exit_2(workload, tmp_path, capsys, edit, words):
    crafted = _crafted_plan(tmp_path, workload, edit)
    code, text = _main(["run", str(workload), "--from-plan", str(crafted), "--out", str(tmp_path / "r"), "--quiet"],
                       capsys)
    assert code == 2, text
    assert str(crafted) in text and words in text


def test_out_inside_the_workload_folder_or_on_a_file_is_exit_2(workload, tmp_path, capsys):
    code, text = _main(["run", str(workload), "--phase", "p:forward:c1", "--out", str(workload / "runs" / "x"),
                        "--quiet"], capsys)
    assert code == 2 and "--out is inside the workload folder" in text
    assert not (workload / "runs").exists()
    f = tmp_path / "afile"
    f.write_text("x")
    code, text = _main(["run", str(workload), "--phase", "p:forward:c1", "--out", str(f), "--quiet"], capsys)
    assert code == 2 and "--out names a file, not a folder" in text


def test_oversized_body_file_is_refused_before_reading(workload, tmp_path, capsys):
    (workload / "999.json").write_bytes(b'{"prompt": "' + b"x" * 2000 + b'"}')
    code, text = _main(["run", str(workload), "--phase", "p:forward:c1", "--out", str(tmp_path / "r"),
                        "--max-body-bytes", "1000", "--quiet"], capsys)
    assert code == 2
    assert "999.json: body file is 2014 bytes, over the limit of 1000 (--max-body-bytes)" in text


# -- output safety ------------------------------------------------------------------------------


def test_planted_symlinks_are_not_followed(workload, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "run"
    out.mkdir()
    for name in ("summary.json.tmp", "plan.json.tmp", "report.md.tmp", "report.md", "summary.json"):
        (out / name).symlink_to(victim)
    with HostileServer("ok") as srv:
        code, _ = _main(_base(workload, srv.url, out), capsys)
    assert code == 0
    assert victim.read_text() == "precious\n"
    assert not (out / "summary.json").is_symlink()
    assert orjson.loads((out / "summary.json").read_bytes())["records"] == N_BODIES
    # a symlink at records.jsonl is refused outright
    out2 = tmp_path / "run2"
    out2.mkdir()
    (out2 / "records.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    with HostileServer("ok") as srv:
        code, text = _main(_base(workload, srv.url, out2), capsys)
    assert code == 2 and "records.jsonl in the run directory is a symlink" in text
    assert not (tmp_path / "nowhere.jsonl").exists()


# -- resources ----------------------------------------------------------------------------------


def _limited(nofile: tuple[int, int] | None = None, fsize: int | None = None):
    def pre() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, nofile)
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    return pre


def _sub(argv: list[str], **limits) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvreplay", *argv], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "MPLBACKEND": "Agg"}, preexec_fn=_limited(**limits))


def test_open_file_limit_below_the_concurrency_is_exit_2(workload, tmp_path):
    p = _sub(["run", str(workload), "--phase", "p:forward:c500", "--out", str(tmp_path / "r"), "--quiet"],
             nofile=(200, 200))
    assert p.returncode == 2, p.stderr
    assert ("concurrency 500 needs about 564 open files, but the open-file limit is 200 (hard limit 200): "
            "raise it (ulimit -n 564) or lower the concurrency") in p.stderr


def test_open_file_soft_limit_is_raised_when_the_hard_limit_allows(workload, tmp_path):
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 400:
        pytest.skip(f"hard open-file limit {hard} is below the 364 this test needs")
    with HostileServer("ok") as srv:
        p = _sub(_base(workload, srv.url, tmp_path / "r")[:6] + ["--phase", "p:forward:c300", "--out",
                                                                  str(tmp_path / "r"), "--quiet"],
                 nofile=(100, hard))
    assert p.returncode == 0, p.stderr
    recs = (tmp_path / "r" / "records.jsonl").read_bytes().splitlines()
    assert [orjson.loads(r)["status"] for r in recs] == ["ok"] * N_BODIES


def test_disk_full_is_exit_3_without_a_half_written_record(tmp_path):
    wl = tmp_path / "wl"
    make_workload(wl)
    for i in range(4, 40):  # 40 positions
        (wl / f"{i:03d}.json").write_bytes((wl / "000.json").read_bytes().replace(b"question 0", b"q %d" % i))
    out = tmp_path / "run"
    with HostileServer("ok") as srv:
        p = _sub(_base(wl, srv.url, out), fsize=20000)
    assert p.returncode == 3, p.stderr
    data = (out / "records.jsonl").read_bytes()
    assert data.endswith(b"\n")
    recs = [orjson.loads(ln) for ln in data.splitlines()]  # every line a whole record
    assert 1 <= len(recs) < 40 and len(data) <= 20000
    summary = orjson.loads((out / "summary.json").read_bytes())  # small: written when possible
    assert summary["aborted"]["reason"] == "disk_full"
    assert "records.jsonl not writable: [Errno 28] short write of a record" in summary["aborted"]["message"]
    assert summary["records"] == len(recs) and summary["records_lost"] >= 1
    # later, with room again, `kvreplay report` rebuilds the summary from the whole records
    assert main(["report", str(out)]) == 0
    assert (out / "report.md").exists()


def test_emfile_is_a_client_error_that_aborts_not_a_connect_error(workload, tmp_path, capsys, monkeypatch):
    from kvreplay.runner import h1

    async def no_fd(self, fresh):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(h1.H1Client, "_acquire", no_fd)
    with HostileServer("ok") as srv:
        code, text = _main(_base(workload, srv.url, tmp_path / "run"), capsys)
    assert code == 3
    summary = orjson.loads((tmp_path / "run" / "summary.json").read_bytes())
    assert summary["aborted"]["reason"] == "client_resources"
    ph = summary["phases"][0]
    assert ph["failed"] == {"client_error": 1} and ph["not_sent"] == N_BODIES - 1
    recs = [orjson.loads(ln) for ln in (tmp_path / "run" / "records.jsonl").read_bytes().splitlines()]
    assert recs[0]["error"] == "client resources exhausted: [Errno 24] Too many open files"


def test_unexpected_exception_is_a_client_error_record_and_exit_1(workload, tmp_path, capsys, monkeypatch):
    from kvreplay.runner import _runner

    calls = {"n": 0}
    real = _runner.check_usage

    def flaky(out):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom in accounting")
        return real(out)

    monkeypatch.setattr(_runner, "check_usage", flaky)
    with HostileServer("ok") as srv:
        code, text = _main(_base(workload, srv.url, tmp_path / "run"), capsys)
    assert code == 1
    assert "1 request(s) failed inside the client (status client_error)" in text
    recs = sorted((orjson.loads(ln) for ln in (tmp_path / "run" / "records.jsonl").read_bytes().splitlines()),
                  key=lambda r: r["position"])
    assert [r["status"] for r in recs] == ["ok", "client_error", "ok", "ok"]
    assert recs[1]["error"] == "RuntimeError: boom in accounting" and recs[1]["sent"] is True
    summary = orjson.loads((tmp_path / "run" / "summary.json").read_bytes())
    assert summary["phases"][0]["failed"] == {"client_error": 1}


def test_no_leak_helper_finds_a_planted_piece(tmp_path):
    """The leak check itself fails on a VALUE: an 8-character piece of the key in any file."""
    from hostile.harness import Result

    (tmp_path / "f.txt").write_text("xx" + KEY[5:13] + "yy")
    assert leaked(Result(0, 0.0, tmp_path, "", "", 0, [])) == ["f.txt"]


def test_oversized_jsonl_workload_is_refused_from_its_size(tmp_path, capsys, monkeypatch):
    from kvreplay.workload import _loader

    wl = tmp_path / "w.jsonl"
    wl.write_bytes(b'{"prompt": "hello"}\n' * 10)  # 200 bytes
    monkeypatch.setattr(_loader, "MAX_WORKLOAD_BYTES", 150)
    monkeypatch.setattr(_loader.Path, "read_bytes", lambda self: pytest.fail("read before the size check"))
    code, text = _main(["run", str(wl), "--phase", "p:forward:c1", "--out", str(tmp_path / "r"), "--quiet"], capsys)
    assert code == 2
    assert f"{wl}: workload file is 200 bytes, over 150 (split it, or give a folder of *.json)" in text
