"""Gaps left by issue 17 (docs/reliability.md): the run directory's first writes, credentials in
``ab``/``probe`` target URLs, short secrets."""

from __future__ import annotations

import asyncio
import base64
import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from hostile.harness import make_workload
from hostile.server import HostileServer
from mockserver import MockServer

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
    from kvreplay.rundir import planfile

    # plan.json is streamed entry by entry (atomic_write_chunks) or, for a plan without a
    # streamed sequence, written whole (atomic_write_json): both fail here
    def failing(real):
        def write(path, data):
            if path.name == "plan.json":
                raise OSError(err, words, str(path) + ".tmp")
            return real(path, data)
        return write

    monkeypatch.setattr(planfile, "atomic_write_json", failing(planfile.atomic_write_json))
    monkeypatch.setattr(planfile, "atomic_write_chunks", failing(planfile.atomic_write_chunks))
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
    from kvreplay.rundir import records

    def full(path, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(records, "open_new", full)
    out = tmp_path / "run"
    with HostileServer("ok") as srv:
        code = main(_base(workload, srv.url, out))
        sent = srv.requests
    cap = capsys.readouterr()
    assert code == 2
    assert cap.err == (f"kvreplay: error: {out}, field '--out': cannot create records.jsonl: "
                       "No space left on device; nothing was sent\n")
    assert sent == 0 and not (out / "plan.json").exists()


# -- 2b: URL credentials in `ab` and `probe` ----------------------------------------------------

USER, PASSWORD = "alice", "s3cret-pass-9"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


class _AuthServer(MockServer):
    """The runner tests' streaming server on its own thread and loop, noting each request's
    Authorization header; ``/health`` answers 200 (``ab``'s readiness check)."""

    def __init__(self, **cfg):
        super().__init__(**cfg)
        self.auth: list[tuple[str, str | None]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _chat(self, request):
        self.auth.append((request.path, request.headers.get("Authorization")))
        return await super()._chat(request)

    async def _health(self, request):
        self.auth.append((request.path, request.headers.get("Authorization")))
        return web.json_response({"status": "ok"})

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._chat)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    def __enter__(self) -> _AuthServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def cred_url(self) -> str:
        return self.base_url.replace("http://", f"http://{USER}:{PASSWORD}@")


def _no_secret_anywhere(out: Path, proc: subprocess.CompletedProcess) -> None:
    """Neither the password, nor ``user:password``, nor the header's base64 form, in any file or stream."""
    pieces = [PASSWORD, f"{USER}:{PASSWORD}", BASIC.split(" ")[1]]
    files = [f for f in out.rglob("*") if f.is_file()]
    assert files
    for f in files:
        data = f.read_bytes()
        assert not [p for p in pieces if p.encode() in data], f
    assert not [p for p in pieces if p in proc.stdout + proc.stderr]


def _cli(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "kvreplay", *argv], capture_output=True, text=True, env=env,
                          timeout=180)


def test_probe_sends_url_credentials_as_basic_auth_and_never_writes_them(tmp_path):
    out = tmp_path / "probe"
    with _AuthServer(tokens=2) as srv:
        p = _cli("probe", "--target", srv.cred_url, "--backend", "none", "--sizes", "1k,2k", "--cold-repeats", "1",
                 "--flush-max", "1", "--flush-repeats", "1", "--out", str(out))
        seen = list(srv.auth)
        port = srv.base_url.rsplit(":", 1)[1]
    assert p.returncode == 0, p.stderr
    assert seen and {a for _, a in seen} == {BASIC}
    assert {path for path, _ in seen} == {"/v1/chat/completions"}
    verdict = orjson.loads((out / "verdict.json").read_bytes())
    assert verdict["target"] == f"http://[REDACTED]@127.0.0.1:{port}"
    assert sorted(f.name for f in out.iterdir()) == ["report.md", "requests.jsonl", "verdict.json"]
    _no_secret_anywhere(out, p)


def test_ab_sends_url_credentials_as_basic_auth_and_never_writes_them(workload, tmp_path):
    out = tmp_path / "ab"
    with _AuthServer(tokens=2) as srv:
        p = _cli("ab", str(workload), "--target", srv.cred_url, "--backend", "none", "--arm", "off=true",
                 "--arm", "on=true", "--reps", "1", "--phases", "c1", "--out", str(out), "--quiet")
        seen = list(srv.auth)
        port = srv.base_url.rsplit(":", 1)[1]
    assert p.returncode == 0, p.stderr
    # 2 blocks: a readiness check each, then the 4 bodies
    assert [path for path, _ in seen].count("/health") == 2
    assert [path for path, _ in seen].count("/v1/chat/completions") == 2 * 4
    assert {a for _, a in seen} == {BASIC}
    ab = orjson.loads((out / "ab.json").read_bytes())
    assert ab["target"] == f"http://[REDACTED]@127.0.0.1:{port}"
    plans = sorted(out.rglob("plan.json"))
    assert len(plans) == 2
    assert {orjson.loads(f.read_bytes())["run"]["target"] for f in plans} == {ab["target"]}
    _no_secret_anywhere(out, p)


# -- 2c: secrets too short to redact are refused ------------------------------------------------


@pytest.fixture()
def _forget_secrets():
    from kvreplay import redaction

    redaction.clear()
    yield
    redaction.clear()


def test_a_3_character_api_key_is_exit_2_and_never_sent(workload, tmp_path, capsys, monkeypatch, _forget_secrets):
    monkeypatch.setenv("KVR_SHORT_KEY", "  k3y \n")  # stripped to 3 characters
    out = tmp_path / "run"
    with HostileServer("key_echo_401") as srv:
        code = main([*_base(workload, srv.url, out), "--api-key-env", "KVR_SHORT_KEY"])
        sent = srv.requests
    cap = capsys.readouterr()
    assert code == 2 and sent == 0
    assert cap.err == ("kvreplay: error: field '--api-key-env': the API key: a secret of 3 characters is too short "
                       "to keep out of kvreplay's outputs (at least 4); use a longer one\n")
    assert not out.exists() or not any(out.iterdir())


def test_a_4_character_api_key_is_accepted_and_redacted(workload, tmp_path, capsys, monkeypatch, _forget_secrets):
    monkeypatch.setenv("KVR_KEY4", "k3y9")
    out = tmp_path / "run"
    with HostileServer("key_echo_401") as srv:
        code = main([*_base(workload, srv.url, out), "--api-key-env", "KVR_KEY4"])
        sent = srv.requests
    assert code == 3 and sent == 1  # the echoing 401 aborts after the first request
    rec = orjson.loads((out / "records.jsonl").read_bytes().splitlines()[0])
    assert rec["error"] == "bad key: [REDACTED]"
    for f in out.rglob("*"):
        if f.is_file():
            assert b"k3y9" not in f.read_bytes(), f
    assert "k3y9" not in "".join(capsys.readouterr())


@pytest.mark.parametrize("userinfo, n", [("alice:pw", 2), ("tok@", 3)])
def test_a_short_url_password_or_lone_user_is_exit_2(workload, tmp_path, capsys, _forget_secrets, userinfo, n):
    out = tmp_path / "run"
    with HostileServer("ok") as srv:
        url = srv.url.replace("http://", "http://" + userinfo.rstrip("@") + "@")
        code = main(_base(workload, url, out))
        sent = srv.requests
    cap = capsys.readouterr()
    assert code == 2 and sent == 0
    assert cap.err == (f"kvreplay: error: field '--target': credentials in the target URL: a secret of {n} "
                       "characters is too short to keep out of kvreplay's outputs (at least 4); use a longer one\n")
    assert userinfo.split(":")[-1].rstrip("@") not in cap.err
