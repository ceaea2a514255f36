"""Execute a frozen experiment: every step inside one window, restore always.

Rules (times in seconds from the experiment's start, ``[window]``):

- No step starts after ``stop_new_after``: it is ``deferred`` with the reason.
  A ``run`` step that is running then sends no new request (the runner's
  ``stop_new_after``) and in-flight requests are cancelled at
  ``hard_deadline - restore_reserve``; a step cut short is ``aborted``.
- ``restore`` steps always run: after an abort, after Ctrl-C (SIGINT/SIGTERM),
  after a failed step, and past ``stop_new_after``; their commands are bounded
  by ``hard_deadline``.
- A step that sends nothing (incarnation, restore) is ``measured`` when its
  checks pass and ``failed`` with the numbers when they do not. Steps that
  depend on a failed incarnation (until the next one) are ``deferred``.
- The runner's abort rules hold inside a run step (auth, OOM/CUDA/Xid, identity
  drift, ``abort_if``, ``max_error_rate``); an abort, identity drift against the
  incarnation or its pins, or an interrupt aborts the window: later steps are
  ``deferred`` ("window aborted: ...") and the restore runs.
- A ``probe`` step (``experiments.probe_step``) runs ``kvreplay probe``'s legs
  against the current incarnation: it starts only before ``stop_new_after``, sends
  no new leg after it (``aborted``, "deadline: no new probe requests after X s", its
  verdict's ``stopped`` and its cut cells partial: ``experiments.probe_cut``; the
  window goes on to the restore) and is cancelled (``aborted``, its
  ``requests.jsonl`` kept) at ``hard_deadline - restore_reserve``; identity drift
  during it, or pins that no longer hold, abort the window; a leg answered 401/403 aborts it (``auth``); other failed
  legs make the step ``failed`` with their count and the first error.

Each sending step writes an ordinary run directory (``steps/NN-name``); other
steps keep their command logs and ``step.json`` there too. A run step against the
simulator records its time scale in ``plan.json`` (``run.sim_time_scale``), and so does
each block of an ab step (``experiments.ab.run_ab``).

At the end, a server this window's lifecycle commands left listening (the incumbent
a restore brought back, or whatever the last start/arm command left when the restore
did not complete) is ``WindowRun.left_running``: URL, port and pid
(``ServerControl.left_running``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from kvreplay.clock import now_ns
from kvreplay.experiments.window.lifecycle import ServerControl, expand, identity_mismatches
from kvreplay.experiments.window.spec import ExperimentSpec, StepSpec, WindowSpec
from kvreplay.plan import Plan
from kvreplay.safe_io import atomic_write_json
from kvreplay.workload import Workload

__all__ = ["StepResult", "WindowRun", "utc_now"]


def utc_now() -> str:
    """ISO 8601 UTC time with seconds (``2026-12-01T07:03:35Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class StepResult:
    """What happened to one step (``result.json``'s ``steps``)."""

    name: str
    kind: str
    status: str = "deferred"
    reason: str | None = None
    run_dir: str | None = None
    comparable: bool = True
    label: str | None = None
    started: str | None = None
    ended: str | None = None
    checks: dict[str, Any] = field(default_factory=dict)
    incarnation: str | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"name": self.name, "kind": self.kind, "status": self.status, "reason": self.reason,
                "run_dir": self.run_dir, "comparable": self.comparable, "label": self.label,
                "incarnation": self.incarnation, "started": self.started, "ended": self.ended,
                "checks": self.checks}


class WindowRun:
    """One execution of a frozen experiment.

    Args:
        exp: The parsed file.
        frozen: ``experiment.json``'s content (already written).
        plans: Frozen plan per sending step.
        workload: The bodies.
        out: Experiment directory.
        window: Deadlines in force.
        headers: Request headers (Authorization); never written.
        say: Progress line sink.
    """

    def __init__(self, exp: ExperimentSpec, frozen: dict[str, Any], plans: dict[str, Plan],
                 workload: Workload | None, out: Path, window: WindowSpec, headers: dict[str, str],
                 say: Callable[[str], None]) -> None:
        self.exp, self.frozen, self.plans, self.workload = exp, frozen, plans, workload
        self.out, self.window, self.headers, self.say = out, window, headers, say
        from kvreplay.runner.identity import pins_from_mapping

        self.pins = pins_from_mapping(exp.server.identity, source="[server.identity]")
        self.server = ServerControl(exp.server, out, headers, exp.path.parent)
        self.t0 = now_ns()
        self.aborted: dict[str, str] | None = None
        self.interrupted = False
        self.current: asyncio.Task | None = None
        self.in_restore = False
        self.snapshot_identity: dict[str, Any] | None = None
        self.snapshot_note: str | None = None
        self.inc_identity: dict[str, Any] | None = None
        self.incarnation: str | None = None
        self.blocked: str | None = None
        self.results: list[StepResult] = []
        self.started = utc_now()
        self.ended: str | None = None
        self.closed: list[dict[str, Any]] = []
        self.left_running: dict[str, Any] | None = None

    # -- time ---------------------------------------------------------------------------------
    def elapsed(self) -> float:
        """Seconds since the experiment started."""
        return (now_ns() - self.t0) / 1e9

    def _left(self, at: float | None) -> float | None:
        return None if at is None else max(0.0, at - self.elapsed())

    # -- signals ------------------------------------------------------------------------------
    def _on_signal(self) -> None:
        self.interrupted = True
        self.abort("interrupt", "operator interrupt (signal)")
        if self.in_restore:
            self.say("interrupt: the restore step is running and will finish")
        elif self.current is not None and not self.current.done():
            self.current.cancel()

    def _install(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, self._on_signal)

    def abort(self, reason: str, message: str) -> None:
        """Abort the window (first reason kept): later steps are deferred, restore still runs."""
        if self.aborted is None:
            self.aborted = {"reason": reason, "message": message[:1024]}
            self.say(f"window aborted: {reason}: {message}")

    # -- main loop ----------------------------------------------------------------------------
    async def run(self) -> list[StepResult]:
        """Run every step (see module docstring); returns the step results in file order."""
        self._install()
        try:
            if self.exp.server.is_sim:
                await self.server.start_sim(None)
            ident, _snap, err = await self.server.read()
            self.snapshot_identity = ident
            if ident is None:
                self.snapshot_note = f"no identity before the first step ({err or 'no counters adapter'})"
            else:
                bad = identity_mismatches(ident, self.exp.server.identity)
                if bad:
                    self.abort("identity_pins", "before the first step: " + "; ".join(bad))
            self.out.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.out / "snapshot.json", {"identity": ident, "note": self.snapshot_note})
            for st in self.exp.steps:
                res = StepResult(st.name, st.kind, comparable=st.comparable, label=st.settings.get("label"))
                self.results.append(res)
                if st.kind == "restore":
                    await self._guarded(st, res, self._restore)
                    continue
                why = self._why_not(st)
                if why is not None:
                    res.status, res.reason = "deferred", why
                    self.say(f"step {st.name}: deferred: {why}")
                    continue
                step_fn = {"incarnation": self._incarnation, "run": self._run, "ab": self._ab,
                           "probe": self._probe}[st.kind]
                await self._guarded(st, res, step_fn)
        finally:
            restored = any(r.kind == "restore" and r.status == "measured" for r in self.results)
            self.closed = await self.server.close(restored=restored)
            self.left_running = self._left_running()
            self.ended = utc_now()
        return self.results

    def _left_running(self) -> dict[str, Any] | None:
        """The server this window's lifecycle commands left listening (``ServerControl.left_running``)."""
        srv = self.exp.server
        ran_cmds = srv.start is not None or srv.restore is not None or any(
            st.kind == "ab" and any(a.get("cmd") for a in st.settings.get("arms", [])) for st in self.exp.steps)
        if srv.is_sim or not ran_cmds:
            return None
        rs = next((r for r in self.results if r.kind == "restore"), None)
        if rs is not None and rs.status == "measured":
            by = f"the incumbent server restored by step {rs.name}"
        elif rs is not None:
            by = f"a server this window started (restore step {rs.name} {rs.status}: it may not be the incumbent)"
        else:
            by = "a server this window started (no restore step)"
        try:
            return self.server.left_running(by)
        except OSError:
            return None

    def _why_not(self, st: StepSpec) -> str | None:
        if self.aborted is not None:
            return f"window aborted: {self.aborted['reason']}"
        stop = self.window.stop_new_after_s
        if stop is not None and self.elapsed() >= stop:
            return f"window: no step starts after stop_new_after = {stop:g} s (elapsed {self.elapsed():.1f} s)"
        if st.kind != "incarnation" and self.blocked is not None:
            return self.blocked
        if st.kind != "incarnation" and self.server.url is None and not self.exp.server.is_sim:
            return "no server: the target needs an incarnation step first ({port} in the URL)"
        return None

    async def _guarded(self, st: StepSpec, res: StepResult, fn: Callable[[StepSpec, StepResult], Any]) -> None:
        res.started = utc_now()
        res.incarnation = self.incarnation
        self.say(f"step {st.name} ({st.kind}) at {self.elapsed():.1f} s")
        (self.out / st.dir).mkdir(parents=True, exist_ok=True)
        self.in_restore = st.kind == "restore"
        self.current = asyncio.ensure_future(fn(st, res))
        # Run and ab steps stop themselves (the runner's and ab's stop_new_after / hard_deadline);
        # an incarnation or a probe is cancelled at hard_deadline - restore_reserve; the restore is
        # bounded by its commands and hard_deadline.
        cut = self._left(self.window.cancel_at_s) if st.kind in ("incarnation", "probe") else None
        try:
            await asyncio.wait_for(asyncio.shield(self.current), cut) if cut is not None else await self.current
        except TimeoutError:
            self.current.cancel()
            await asyncio.gather(self.current, return_exceptions=True)
            res.status, res.reason = "aborted", (f"window: hard_deadline - restore_reserve = "
                                                 f"{self.window.cancel_at_s:g} s reached during the step")
            self.abort("hard_deadline", res.reason)
        except asyncio.CancelledError:
            res.status, res.reason = "aborted", "operator interrupt (signal)"
            self.abort("interrupt", "operator interrupt (signal)")
        except Exception as exc:  # noqa: BLE001 - a step's failure must not skip the restore
            res.status, res.reason = "failed", f"{type(exc).__name__}: {exc}"
        finally:
            self.current = None
            self.in_restore = False
            self._install()  # the runner removes its own handlers (and so ours) at its end
        res.ended = utc_now()
        if st.sends:
            res.run_dir = st.dir
        (self.out / st.dir).mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.out / st.dir / "step.json", {"experiment_sha256": self.frozen["experiment_sha256"],
                                                            **res.to_json()})
        self.say(f"step {st.name}: {res.status}" + (f" ({res.reason})" if res.reason else ""))

    # -- steps --------------------------------------------------------------------------------
    async def _incarnation(self, st: StepSpec, res: StepResult) -> None:
        logs = self.out / st.dir
        self.incarnation = st.name
        res.incarnation = st.name
        self.blocked = None
        if self.exp.server.is_sim:
            res.checks["start"] = await self.server.start_sim(st.settings.get("sim"))
        else:
            assert self.exp.server.start is not None
            cmds = await self.server.start_with(self.exp.server.start, "start", logs)
            res.checks["commands"] = cmds
            bad_cmd = [c for c in cmds if not c.get("background") and c.get("rc") != 0 and c.get("name") == "start"]
            if bad_cmd:
                return self._fail_inc(res, f"start command failed (rc {bad_cmd[0].get('rc')}, "
                                           f"{'timed out' if bad_cmd[0].get('timed_out') else 'exited'})")
        ready = await self.server.wait_ready()
        res.checks["ready"] = ready
        if not ready["ready"]:
            return self._fail_inc(res, f"not ready after {ready['waited_s']} s: {ready['last_error']}")
        ident, snap, err = await self.server.read()
        res.checks["identity"] = ident
        if err:
            return self._fail_inc(res, f"identity unreadable: {err}")
        bad = identity_mismatches(ident, self.exp.server.identity)
        if bad:
            res.checks["pins"] = bad
            return self._fail_inc(res, "identity pins do not hold: " + "; ".join(bad))
        self.inc_identity = ident
        if self.snapshot_identity is None:
            self.snapshot_identity = ident
            self.snapshot_note = (self.snapshot_note or "") + f"; snapshot taken at the first incarnation ({st.name})"
        if st.settings.get("fresh"):
            from kvreplay.runner.counters import check_fresh

            if snap is None:
                return self._fail_inc(res, "fresh required but the backend reports no counters")
            ok, why = check_fresh(snap)
            res.checks["fresh"] = {"passed": ok, "reason": why,
                                   "counters": {k: v for k, v in snap.common.items() if v}}
            if not ok:
                return self._fail_inc(res, f"fresh check failed: {why}")
        comp = await self.server.completion_check()
        if comp is not None:
            res.checks["completion"] = comp
            if not comp["passed"]:
                return self._fail_inc(res, f"ready completion: finish_reason {comp.get('finish_reason')!r}, want "
                                           f"'stop' ({comp.get('error') or 'ok'})")
        res.status = "measured"

    def _fail_inc(self, res: StepResult, why: str) -> None:
        res.status, res.reason = "failed", why
        self.blocked = f"incarnation {res.name} failed: {why}"

    async def _run(self, st: StepSpec, res: StepResult) -> None:
        from kvreplay.runner import RunOptions, execute_plan

        plan = self.plans[st.name]
        assert self.workload is not None and self.server.url is not None
        url, is_sim = self.server.url, self.exp.server.is_sim
        opts = RunOptions(
            target_url=url, target_label="sim" if is_sim else url, out_dir=self.out / st.dir,
            backend_name=self.server.backend_name, headers=self.headers,
            drain_timeout_s=st.settings.get("drain_timeout_s", 10.0), drain_interval_s=0.1,
            stop_new_after_s=self._left(self.window.stop_new_after_s),
            hard_deadline_s=self._left(self.window.cancel_at_s),
            elapsed_before_s=self.elapsed(), quiet=True, identity_pins=self.pins,
            abort_if=self.window.abort_if, max_error_rate=self.window.max_error_rate,
            abort_on_malformed=self.window.abort_on_malformed,
            # plan.json records the simulator's time scale, as `kvreplay run --target sim` does, so
            # the step's reports give model ms with the scale stated (experiments.timescale)
            run_extra=({"sim_time_scale": self.server.sim_config.time_scale}
                       if is_sim and self.server.sim_config is not None else {}),
        )
        summary = await execute_plan(plan, plan.bind(self.workload), opts, backend_factory=self._factory(url))
        self._judge_run(res, summary)

    def _factory(self, url: str) -> Callable[[aiohttp.ClientSession], Any]:
        name, profile = self.server.backend_name, self.exp.server.profile

        async def factory(session: aiohttp.ClientSession) -> Any:
            if name == "none":
                return None
            from kvreplay.backends import detect, make_backend

            chosen = await detect(url, session) if name == "auto" else name
            return make_backend(chosen, url, session, profile=profile)

        return factory

    def _judge_run(self, res: StepResult, summary: dict[str, Any]) -> None:
        ab = summary.get("aborted")
        ident = (summary.get("identity") or {}).get("after")
        res.checks["identity_after"] = ident
        bad = identity_mismatches(ident, self.exp.server.identity) if ident is not None else []
        if ab:
            res.status, res.reason = "aborted", f"{ab.get('reason')}: {ab.get('message')}"
            if ab.get("reason") == "interrupt":
                self.interrupted = True
            if ab.get("reason") not in ("deadline",):
                self.abort(str(ab.get("reason")), f"step {res.name}: {ab.get('message')}")
            return
        if ident is not None and self.inc_identity is not None and ident != self.inc_identity:
            res.status, res.reason = "aborted", "identity drift against the incarnation's identity"
            self.abort("identity_drift", f"step {res.name}: identity changed since incarnation {self.incarnation}")
            return
        if bad:
            res.status, res.reason = "aborted", "identity pins do not hold: " + "; ".join(bad)
            self.abort("identity_pins", res.reason)
            return
        invalid = [f"{p['name']}: {'; '.join(p.get('invalid_reasons') or ['invalid'])}"
                   for p in summary.get("phases", []) if not p.get("valid", True)]
        res.checks["phases_invalid"] = invalid
        if invalid:
            res.status, res.reason = "failed", " | ".join(invalid)
        else:
            res.status = "measured"

    async def _ab(self, st: StepSpec, res: StepResult) -> None:
        from kvreplay.experiments.ab.arms import Arm, run_ab
        from kvreplay.experiments.ab.compare import parse_threshold

        s = st.settings
        srv = self.server
        if srv.port is None and not self.exp.server.is_sim:
            from kvreplay.experiments.window.lifecycle import free_port

            srv.port = free_port()
            srv.url = expand(self.exp.server.target, port=srv.port, out_dir=self.out)
        here = self.exp.path.parent
        arms = [Arm(a["name"], expand(a["cmd"], port=srv.port, out_dir=self.out, here=here) if a["cmd"] else "")
                for a in s["arms"]]
        thresholds = [parse_threshold(t, "primary") for t in s["primary"]]
        thresholds += [parse_threshold(t, "protected") for t in s["protected"]]
        result = await run_ab(
            workload=self.workload, plan=self.plans[st.name], arms=arms, reps=s["reps"], out=self.out / st.dir,
            target="sim" if self.exp.server.is_sim else str(srv.url), backend_name=srv.backend_name,
            thresholds=thresholds, sim_base=srv.sim_config if self.exp.server.is_sim else None,
            profile=self.exp.server.profile, headers=self.headers, seed=int(s.get("seed", 0)),
            ready_timeout_s=s["ready_timeout_s"], cmd_timeout_s=s["cmd_timeout_s"],
            drain_timeout_s=s["drain_timeout_s"], progress=lambda m: self.say(f"  {st.name}: {m}"),
            stop_new_after_s=self._left(self.window.stop_new_after_s),
            hard_deadline_s=self._left(self.window.cancel_at_s),
            abort_if=self.window.abort_if,
            contract={"identity_pins": self.pins, "abort_on_malformed": self.window.abort_on_malformed})
        stopped = result["ab"].get("stopped")
        res.checks["verdict"] = result.get("verdict")
        if stopped:
            res.status, res.reason = "aborted", stopped
            if stopped.startswith("hard deadline") or stopped.endswith("aborted: hard_deadline"):
                self.abort("hard_deadline", f"step {st.name}: {stopped}")
            elif not (stopped.startswith("deadline") or stopped.endswith("aborted: deadline")):
                self.abort("ab_stopped", f"step {st.name}: {stopped}")
        else:
            res.status = "measured"

    async def _probe(self, st: StepSpec, res: StepResult) -> None:
        from kvreplay.experiments.probe.step import run_probe_step

        assert self.server.url is not None
        is_sim = self.exp.server.is_sim
        verdict = await run_probe_step(
            url=self.server.url, backend_name=self.server.backend_name, profile=self.exp.server.profile,
            headers=self.headers, settings=st.settings, out_dir=self.out / st.dir,
            sim_time_scale=self.server.sim_config.time_scale if is_sim and self.server.sim_config else None,
            say=lambda m: self.say(f"  {st.name}: {m}"), stop_new_after_s=self._left(self.window.stop_new_after_s))
        ident = verdict["identity"]
        res.checks.update(identity_after=ident["after"], legs=verdict["requests"],
                          legs_failed=len(verdict["legs_failed"]), plain=verdict.get("plain"),
                          stopped=verdict.get("stopped"))
        auth = [f for f in verdict["legs_failed"] if f.get("http_status") in (401, 403)]
        bad = identity_mismatches(ident["after"], self.exp.server.identity) if ident["after"] is not None else []
        if auth:
            res.status, res.reason = "aborted", f"auth: HTTP {auth[0]['http_status']} from the server"
            self.abort("auth", f"step {st.name}: {res.reason}")
        elif ident["drift"] or (ident["after"] is not None and self.inc_identity is not None
                                and verdict["backend"] == self.server.backend_name  # same adapter, same shape
                                and ident["after"] != self.inc_identity):
            res.status, res.reason = "aborted", "identity drift against the incarnation's identity"
            self.abort("identity_drift", f"step {st.name}: identity changed since incarnation {self.incarnation}")
        elif bad:
            res.status, res.reason = "aborted", "identity pins do not hold: " + "; ".join(bad)
            self.abort("identity_pins", res.reason)
        elif verdict.get("stopped"):
            # as a run step cut at stop_new_after (the runner's "deadline"): the step is aborted,
            # the window is not; its cut cells are partial (experiments.probe_cut)
            res.status = "aborted"
            res.reason = f"deadline: no new probe requests after {self.window.stop_new_after_s:g} s"
        elif verdict["legs_failed"]:
            f = verdict["legs_failed"][0]
            res.status = "failed"
            res.reason = (f"{len(verdict['legs_failed'])} of {verdict['requests']} probe requests failed "
                          f"(first: leg {f['leg']}, {f['status']}, HTTP {f['http_status']}, {f['error']})")
        else:
            res.status = "measured"

    async def _restore(self, st: StepSpec, res: StepResult) -> None:
        logs = self.out / st.dir
        hard = self._left(self.window.hard_deadline_s)
        if self.exp.server.is_sim:
            res.checks["start"] = await self.server.start_sim(None)
        else:
            cmd = self.exp.server.restore
            assert cmd is not None
            if hard is not None:
                from dataclasses import replace

                cmd = replace(cmd, timeout_s=max(1.0, min(cmd.timeout_s, hard)))
            res.checks["commands"] = await self.server.start_with(cmd, "restore", logs)
            failed = [c for c in res.checks["commands"] if c.get("name") == "restore" and not c.get("background")
                      and c.get("rc") != 0]
            if failed:
                res.status, res.reason = "failed", f"restore command failed (rc {failed[0].get('rc')})"
                return
        ready = await self.server.wait_ready(None if hard is None else max(1.0, min(hard, 600.0)))
        res.checks["ready"] = ready
        if not ready["ready"]:
            res.status, res.reason = "failed", f"not ready after {ready['waited_s']} s: {ready['last_error']}"
            return
        ident, _snap, err = await self.server.read()
        res.checks["identity"] = ident
        if self.snapshot_identity is None:  # no incumbent and no incarnation was ever up
            bad = identity_mismatches(ident, self.exp.server.identity)
            res.checks["note"] = (self.snapshot_note or "") + "; checked against the pins only"
            if bad or err:
                res.status, res.reason = "failed", err or "; ".join(bad)
                return
        elif ident != self.snapshot_identity:
            diff = sorted(k for k in set(ident or {}) | set(self.snapshot_identity)
                          if (ident or {}).get(k) != self.snapshot_identity.get(k))
            res.status = "failed"
            res.reason = "identity differs from the snapshot before the first step: " + ", ".join(
                f"{k}: {self.snapshot_identity.get(k)!r} -> {(ident or {}).get(k)!r}" for k in diff)
            return
        res.status = "measured"
