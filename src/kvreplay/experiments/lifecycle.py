"""Server lifecycle for experiment windows: incarnations, readiness, identity, restore.

Two kinds of target (``[server] target``):

- ``sim``: the embedded simulator in this process. An incarnation stops the
  current simulator and starts a new one with ``[server.sim]`` overlaid by the
  step's ``sim`` table: zeroed counters, empty cache, a new loopback port. The
  *incumbent* is the simulator with ``[server.sim]`` alone, started before the
  first step; ``restore`` brings exactly that configuration back.
- a URL: lifecycle commands. An incarnation runs ``stop`` (or ends the
  background ``start`` process of the previous incarnation), picks a free
  loopback port for ``{port}``, runs ``start`` (``background = true`` keeps it
  as the server process, in its own process group), then waits for readiness.

Placeholders in URLs and commands: ``{port}`` (this incarnation's port),
``{dir}`` (the experiment directory), ``{here}`` (the experiment file's
folder), ``{python}`` (this interpreter),
``{kvreplay}`` (``{python} -m kvreplay``). Commands run through
``kvreplay.runner.usercmd`` (own session and process group, stdin from
/dev/null, output to a log file in the step's folder, a timeout killing the
whole group); a ``background`` start is spawned the same way here and kept.

Readiness: the ``ready`` URL (else ``/health``, then ``/v1/models``) must answer
200; with ``ready.completion`` a real chat completion must then end with
``finish_reason == "stop"`` (a health endpoint alone proves nothing). The
completion is sent only after the fresh check, so it is never in a step's
counters.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from kvreplay.clock import now_ns
from kvreplay.errors import BackendError, ConfigError
from kvreplay.experiments.background import _Background, _Child
from kvreplay.experiments.ledger import Ledger, reap_group
from kvreplay.experiments.model import Command, ServerSpec
from kvreplay.runner.usercmd import log_tail, run_user_command

__all__ = ["ServerControl", "expand", "free_port", "identity_mismatches", "listening_pid", "run_command"]


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def expand(template: str, *, port: int | None, out_dir: Path, here: Path | None = None) -> str:
    """Replace ``{port}``, ``{dir}``, ``{here}``, ``{python}``, ``{kvreplay}`` in ``template`` (other braces kept)."""
    py = shlex.quote(sys.executable)
    vals = {"{dir}": shlex.quote(str(out_dir.resolve())), "{python}": py, "{kvreplay}": f"{py} -m kvreplay"}
    if here is not None:
        vals["{here}"] = shlex.quote(str(here.resolve()))
    if port is not None:
        vals["{port}"] = str(port)
    for k, v in vals.items():
        template = template.replace(k, v)
    return template


async def run_command(cmd: str, *, name: str, log_dir: Path, timeout_s: float, ledger: Ledger | None = None,
                      port: int | None = None, reap: bool = False) -> dict[str, Any]:
    """Run a user command to completion under the user-command contract.

    Args:
        cmd: Shell line (``/bin/sh -c``).
        name: Log file stem (``<log_dir>/<name>.log``).
        log_dir: Where the log goes.
        timeout_s: Bound on the command (s); its process group is killed then.
        ledger: The experiment's process ledger: the command is written to it as it starts.
        port: The ``{port}`` the command was given (for the ledger).
        reap: Stop what the command left running in its process group once it has exited
            (``ledger.reap_group``: quiesce and check commands); else it stays, in the ledger.

    Returns:
        ``{"name", "cmd", "rc", "timed_out", "wall_s", "log", "tail"}``, and ``"reaped"``
        (``ledger.reap_group``'s record) when something was left and stopped; ``rc`` is None on
        timeout (the process group was killed). Runs through ``runner.usercmd``.
    """
    def noted(pid: int) -> None:
        if ledger is not None:
            ledger.record(pid, name=name, cmd=cmd, port=port, log_dir=log_dir)

    res = await run_user_command(cmd, name=name, log_dir=log_dir, timeout_s=timeout_s, on_spawn=noted)
    got: dict[str, Any] = {"name": name, "cmd": cmd, "rc": None if res.timed_out else res.exit_status,
                           "timed_out": res.timed_out, "wall_s": round(res.duration_s, 3), "log": str(res.log_path),
                           "tail": res.log_tail[-2048:]}
    if reap and res.pid is not None and (reaped := await reap_group(res.pid)) is not None:
        got["reaped"] = reaped
    return got


async def run_check(cmd: str, *, name: str, log_dir: Path, timeout_s: float,
                    ledger: Ledger | None = None, port: int | None = None) -> dict[str, Any]:
    """Run a restore check (``run_command``, what it leaves running reaped), its output captured redacted.

    The command writes ``<log_dir>/check-NAME.log`` itself; once it has exited the log is
    bounded and redacted as every user command's (``runner.usercmd.keep_log``).

    Returns:
        ``run_command``'s record with ``name`` = NAME, ``ok`` (exited 0 in time) and ``output``
        (the log's last 2 KiB, redacted).
    """
    got = await run_command(cmd, name=f"check-{name}", log_dir=log_dir, timeout_s=timeout_s, ledger=ledger,
                            port=port, reap=True)
    output = got["tail"] if Path(got["log"]).is_file() else "(log unreadable)"
    return {**got, "name": name, "ok": got["rc"] == 0, "output": output, "tail": output}


_LEFT_RUNNING: list[_Child] = []
"""Background servers left running on purpose (the restored incumbent): known by pid only."""


def listening_pid(port: int) -> int | None:
    """The pid of a process holding a listening TCP socket on ``port`` on this machine, else None.

    Linux only (None elsewhere): the socket's inode from ``/proc/net/tcp`` and
    ``/proc/net/tcp6`` (state ``0A`` is LISTEN; the local address's port is the hex after
    ``:``, proc(5)), then the process with ``socket:[inode]`` among its ``/proc/PID/fd``
    links (the lowest such pid: a forked worker shares its parent's socket). Processes
    of other users are not readable and are skipped.
    """
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii", errors="replace") as f:
                next(f, None)
                for line in f:
                    parts = line.split()
                    if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(f"socket:[{parts[9]}]")
        except (OSError, ValueError):
            continue
    if not inodes:
        return None
    try:
        pids = sorted(int(d) for d in os.listdir("/proc") if d.isdigit())
    except OSError:
        return None
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return pid
            except OSError:
                continue
    return None


def identity_mismatches(identity: dict[str, Any] | None, pins: dict[str, str]) -> list[str]:
    """Pins (dotted keys of the identity, e.g. ``cache_config.num_gpu_blocks``) that do not hold.

    Matching is ``runner.identity.check_pins`` (as ``run --expect-identity``): a
    list value is compared as its items joined by ``,``.

    Returns:
        One ``"KEY: PINNED -> READ"`` per failed pin (empty when all hold).
    """
    from kvreplay.runner.identity import check_pins, pins_from_mapping

    return [c.describe() for c in check_pins(identity, pins_from_mapping(pins, source="[server.identity]"))]


class ServerControl:
    """The target of one experiment: the current incarnation's URL and how to replace it.

    Args:
        spec: ``[server]``.
        out_dir: The experiment directory (``{dir}``; logs go under each step's folder).
        headers: Request headers (Authorization) for readiness and identity reads.
        here: The experiment file's folder (``{here}``).
    """

    def __init__(self, spec: ServerSpec, out_dir: Path, headers: dict[str, str], here: Path | None = None) -> None:
        self.spec, self.out_dir, self.headers, self.here = spec, out_dir, headers, here
        self.url: str | None = None if "{port}" in spec.target else (None if spec.is_sim else spec.target)
        self.port: int | None = None
        self.sim: Any = None
        self.sim_config: Any = None
        self.bg: _Background | None = None
        self.kept: dict[str, Any] | None = None
        self.backend_name = spec.counter_backend
        self.ledger = Ledger(out_dir)

    def base_sim_config(self, overlay: dict[str, Any] | None = None) -> Any:
        """``[server.sim]`` (with ``overlay``) as a ``SimConfig``.

        Raises:
            ConfigError: an unknown or bad simulator setting.
        """
        from kvreplay.sim import SimConfig

        base = SimConfig.from_mapping(dict(self.spec.sim), where="[server.sim]") if self.spec.sim else SimConfig()
        return SimConfig.from_mapping(dict(overlay), where="step.sim", base=base) if overlay else base

    async def start_sim(self, overlay: dict[str, Any] | None) -> dict[str, Any]:
        """Replace the simulator with a new one (zeroed counters, empty cache)."""
        from kvreplay.sim import SimServer

        cfg = self.base_sim_config(overlay)
        if self.sim is not None:
            await self.sim.stop()
            self.sim = None
        self.sim = SimServer(cfg)
        await self.sim.start(host="127.0.0.1", port=0)
        self.sim_config, self.url, self.port = cfg, self.sim.base_url, self.sim.port
        return {"sim": {"overlay": dict(overlay or {}), "url": self.url}}

    async def stop_current(self, log_dir: Path) -> list[dict[str, Any]]:
        """Stop the current incarnation: the background start process and/or the stop command."""
        done = []
        if self.bg is not None:
            done.append(await self.bg.stop(self.spec.stop_grace_s, self.url))
            self.bg = None
        if self.spec.stop is not None:
            text = expand(self.spec.stop.cmd, port=self.port, out_dir=self.out_dir, here=self.here)
            done.append(await run_command(text, name="stop", log_dir=log_dir, timeout_s=self.spec.stop.timeout_s,
                                          ledger=self.ledger, port=self.port))
        return done

    async def start_with(self, command: Command, name: str, log_dir: Path) -> list[dict[str, Any]]:
        """Stop, pick a port, run ``command`` (start or restore); the URL follows the new port."""
        cmds = await self.stop_current(log_dir)
        self.port = free_port() if "{port}" in (self.spec.target + command.cmd) else self.port
        self.url = expand(self.spec.target, port=self.port, out_dir=self.out_dir, here=self.here)
        text = expand(command.cmd, port=self.port, out_dir=self.out_dir, here=self.here)
        if command.background:
            self.bg = _Background.spawn(text, name=name, log_dir=log_dir, ledger=self.ledger, port=self.port)
            cmds.append(self.bg.info)
        else:
            cmds.append(await run_command(text, name=name, log_dir=log_dir, timeout_s=command.timeout_s,
                                          ledger=self.ledger, port=self.port))
        return cmds

    async def wait_ready(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Poll the ready URL (else ``/health``, then ``/v1/models``) until one answers 200.

        Gives up at ``timeout_s`` (default ``[server.ready] timeout``, else 60 s) or as soon
        as a background start process has exited.

        Returns:
            ``{"ready", "waited_s", "endpoint", "last_error"}``.
        """
        t = timeout_s if timeout_s is not None else (self.spec.ready.timeout_s if self.spec.ready else 60.0)
        if self.url is None:
            return {"ready": False, "waited_s": 0.0, "endpoint": None, "last_error": "no URL yet (no incarnation)"}
        if self.spec.ready is not None and self.spec.ready.url is not None:
            urls = [expand(self.spec.ready.url, port=self.port, out_dir=self.out_dir, here=self.here)]
        else:
            urls = [self.url.rstrip("/") + p for p in ("/health", "/v1/models")]
        t0 = now_ns()
        last = None
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=max(1.0, min(10.0, t)))) as s:
            while True:
                for url in urls:
                    try:
                        async with s.get(url, headers=self.headers) as resp:
                            if resp.status == 200:
                                return {"ready": True, "waited_s": round((now_ns() - t0) / 1e9, 3),
                                        "endpoint": url, "last_error": None}
                            last = f"{url}: HTTP {resp.status}"
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        last = f"{url}: {type(exc).__name__}: {exc}"
                if self.bg is not None and self.bg.exited is not None:
                    last = (f"the start process exited with {self.bg.exited} ({last}); log tail: "
                            f"{log_tail(Path(self.bg.info['log']), 300)!r}")
                    break
                if now_ns() - t0 >= t * 1e9:
                    break
                await asyncio.sleep(0.25)
        return {"ready": False, "waited_s": round((now_ns() - t0) / 1e9, 3), "endpoint": None, "last_error": last}

    async def completion_check(self) -> dict[str, Any] | None:
        """Send ``ready.completion`` (non-streamed); passes when ``finish_reason == "stop"``. None without one."""
        if self.spec.ready is None or self.spec.ready.completion is None or self.url is None:
            return None
        body = dict(self.spec.ready.completion)
        body["stream"] = False
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.spec.ready.timeout_s)) as s:
            try:
                if "model" not in body:
                    async with s.get(self.url.rstrip("/") + "/v1/models", headers=self.headers) as r:
                        cards = orjson.loads(await r.content.read(1 << 20)).get("data") or [{}]
                        body["model"] = cards[0].get("id")
                async with s.post(self.url.rstrip("/") + "/v1/chat/completions", data=orjson.dumps(body),
                                  headers={"Content-Type": "application/json", **self.headers}) as r:
                    raw = await r.content.read(1 << 20)
                    status = r.status
                reply = orjson.loads(raw) if status == 200 else {}
                reason = ((reply.get("choices") or [{}])[0] or {}).get("finish_reason")
            except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError) as exc:
                return {"passed": False, "finish_reason": None, "error": f"{type(exc).__name__}: {exc}"}
        return {"passed": status == 200 and reason == "stop", "http_status": status, "finish_reason": reason,
                "error": None if status == 200 else raw[:200].decode("utf-8", "replace")}

    async def adapter(self, session: aiohttp.ClientSession) -> Any:
        """The counter adapter of the current incarnation (``backend_name`` not ``none``).

        A ``[fleet]``: every replica's adapter as one ``runner.fleet.FleetBackend``
        (``backends.fleet``; counters summed, identity per replica), never the router's.
        Else the ``[server]`` target's (``auto``: detected once, then kept).

        Raises:
            BackendError: detection failed.
            ConfigError: an unknown backend or profile.
        """
        if self.spec.replicas:
            from kvreplay.backends.fleet import open_fleet_backend

            return await open_fleet_backend(self.spec.replicas, self.backend_name, self.spec.profile, session)
        from kvreplay.backends import detect, make_backend

        assert self.url is not None
        if self.backend_name == "auto":
            self.backend_name = await detect(self.url, session)
        return make_backend(self.backend_name, self.url, session, profile=self.spec.profile)

    async def read(self) -> tuple[dict[str, Any] | None, Any, str | None]:
        """Identity and a counter snapshot of the current incarnation (no generation request).

        Returns:
            ``(identity, snapshot, error)``; identity/snapshot None when unreadable.
        """
        if self.url is None:
            return None, None, "no URL (no incarnation yet)"
        if self.backend_name == "none":
            return None, None, None
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            try:
                be = await self.adapter(session)
                return await be.identity(), await be.snapshot(), None
            except (BackendError, ConfigError, aiohttp.ClientError, TimeoutError) as exc:
                return None, None, f"{type(exc).__name__}: {exc}"

    async def drain(self, timeout_s: float, interval_s: float = 0.2) -> dict[str, Any]:
        """Wait until the current incarnation is idle: load gauges zero, counters still (``runner.counters``).

        Returns:
            ``{"passed", "waited_s", "reason"}``; ``passed`` None (not checked) when there is no
            URL or no counters adapter, False after ``timeout_s`` (s) with what kept it busy.
        """
        if self.url is None or self.backend_name == "none":
            return {"passed": None, "waited_s": 0.0, "reason": "no counters adapter: the drain is not checked"}
        from kvreplay.runner.counters import wait_drained

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            try:
                be = await self.adapter(session)
                got = await wait_drained(be, interval_s=interval_s, timeout_s=timeout_s)
            except (BackendError, ConfigError, aiohttp.ClientError, TimeoutError) as exc:
                return {"passed": False, "waited_s": 0.0, "reason": f"{type(exc).__name__}: {exc}"}
        return got.to_json()

    def expand(self, cmd: str) -> str:
        """``cmd`` with this window's ``{port}``, ``{dir}``, ``{here}``, ``{python}``, ``{kvreplay}`` filled in."""
        return expand(cmd, port=self.port, out_dir=self.out_dir, here=self.here)

    async def close(self, *, restored: bool) -> list[dict[str, Any]]:
        """End of the window: stop the simulator and this experiment's background server.

        A background server this experiment started is stopped unless it is the
        restored incumbent (which stays up, as the window promised).
        """
        if self.sim is not None:
            await self.sim.stop()
            self.sim = None
        if self.bg is not None and not restored:
            done = [await self.bg.stop(self.spec.stop_grace_s, self.url)]
            self.bg = None
            return done
        if self.bg is not None:
            # The restored incumbent outlives this process, which holds only its pid (no Popen
            # to warn "subprocess N is still running" at exit); left_running names it.
            _LEFT_RUNNING.append(self.bg.proc)
            self.kept = self.bg.info
            self.bg = None
        return []

    def left_running(self, by: str) -> dict[str, Any] | None:
        """The server still listening at the current URL after ``close``, or None.

        Args:
            by: Who left it (``"the incumbent restored by step restore"``), for the report.

        Returns:
            ``{"url", "port", "pid", "pid_source", "by", "note"}``: the pid is the kept
            background start process (its own process group) when there is one, else the
            owner of the listening socket (``listening_pid``; None when not on this machine
            or not readable). None for the embedded simulator (stopped here), without a URL,
            or when nothing accepts a connection on the URL's port.
        """
        from urllib.parse import urlsplit

        if self.spec.is_sim or self.url is None:
            return None
        parts = urlsplit(self.url)
        host, port = parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with socket.create_connection((host, port), timeout=2.0):
                pass
        except OSError:
            return None
        pid, source = None, None
        if self.kept is not None and _LEFT_RUNNING and _LEFT_RUNNING[-1].poll() is None:
            pid, source = int(self.kept["pid"]), "background start command; its process group"
        elif host in ("127.0.0.1", "localhost", "::1"):
            pid = listening_pid(port)
            source = "owner of the listening socket" if pid is not None else None
        return {"url": self.url, "port": port, "pid": pid, "pid_source": source, "by": by,
                "note": None if pid is not None else "pid not found (another machine, or another user's process)"}
