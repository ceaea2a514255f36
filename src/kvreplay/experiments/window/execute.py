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

- Deadlines count from the experiment's start, or, with ``[window] deadline_from =
  "quiesce"``, from the end of the first measured step of that kind (``deadline_origin``
  trait; ``WindowRun.origin``, kept in ``progress.json`` for ``--resume``).
- A step with a ``when`` (``experiments.conditions``) is evaluated just before it, after
  the deferral rules: false makes it ``skipped`` with its ``condition`` recorded.
- ``[gates] fixed_bytes``: a sending step whose workload changed on disk since the
  freeze is ``failed`` and sends nothing (``experiments.gates``).

Each step runs its kind's ``execute`` (``experiments.steps``: one module per kind);
the rules above read the kind's traits (``restores``, ``starts_server``,
``cancel_at_deadline``, ``sends``), never its name.

Each sending step writes an ordinary run directory (``steps/NN-name``); other
steps keep their command logs and ``step.json`` there too. A run step against the
simulator records its time scale in ``plan.json`` (``run.sim_time_scale``), and so does
each block of an ab step (``experiments.ab.run_ab``).

Crash safety: the window's progress (``rundir.experiment``'s ``progress.json``) is
written atomically at its start and at each step's start and end. A resumed window
(``resume_from``, ``kvreplay experiment --resume``) keeps the results of the steps
that ended before the kill, counts its deadlines from the original start (wall clock)
and refuses a server whose identity is neither the one before the first step nor
the one last known; it checks that first, so a refused resume leaves the directory
untouched (the partial step folders are set aside, and progress.json rewritten, only after).

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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvreplay.clock import RunClock, now_ns
from kvreplay.errors import ConfigError
from kvreplay.experiments.history import close_killed, prior_attempts
from kvreplay.experiments.lifecycle import ServerControl, identity_mismatches
from kvreplay.experiments.model import ExperimentSpec, StepResult, StepSpec, WindowSpec
from kvreplay.experiments.steps import kind_of
from kvreplay.experiments.window.resume import stop_orphans
from kvreplay.plan import Plan
from kvreplay.rundir import write_step_log
from kvreplay.rundir.experiment import write_progress
from kvreplay.safe_io import atomic_write_json
from kvreplay.workload import Workload

__all__ = ["StepResult", "WindowRun", "utc_now"]


def utc_now() -> str:
    """ISO 8601 UTC time with seconds (``2026-12-01T07:03:35Z``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        self.workloads: dict[str, Workload] = {}  # a step's own workload, by step name
        self.out, self.window, self.headers, self.say = out, window, headers, say
        from kvreplay.runner.identity import pins_from_mapping

        self.pins = pins_from_mapping(exp.server.identity, source="[server.identity]")
        self.server = ServerControl(exp.server, out, headers, exp.path.parent)
        self.clock = RunClock.start()
        self.t0 = self.clock.origin_ns
        self.wall_anchor_ns = self.clock.wall_anchor_ns
        self.keep: dict[str, StepResult] = {}
        self.resumed: list[str] = []
        self.set_aside: tuple[str, ...] = ()
        self.accepted = False
        self.known_identities: list[dict[str, Any]] = []
        self.unread: dict[str, Any] | None = None  # series the backend does not read (experiments.unread)
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
        self.left_running: list[dict[str, Any]] | None = None
        self.orphans_stopped: list[dict[str, Any]] = []  # what a killed attempt left, stopped by --resume
        self.attempts: list[dict[str, Any]] = []  # experiments.history: the earlier attempts, then this one
        self.before: dict[str, dict[str, Any]] = {}  # the steps as the killed attempt left them
        self.prior: dict[str, Any] | None = None  # the killed attempt's progress.json
        self.moved: dict[str, str] = {}  # step folder -> its .interrupted name (set aside by the resume)
        self.from_before: set[str] = set()  # steps not run again whose result from before the kill stands
        self.origin: dict[str, Any] | None = None  # [window] deadline_from: the step the deadlines count from

    # -- resume and progress --------------------------------------------------------------------
    def resume_from(self, progress: dict[str, Any], keep: dict[str, StepResult],
                    set_aside: tuple[str, ...] = ()) -> None:
        """Go on with an interrupted window: its start, snapshot, abort and the results ``keep``ed.

        Args:
            progress: ``progress.json`` of the interrupted window.
            keep: Results of the steps not run again (name -> result), in any order.
            set_aside: Step folders (relative to the experiment directory) of the steps run
                again, renamed ``<dir>.interrupted`` once the server's identity is accepted
                (``rundir.experiment.set_aside_step_dir``); a refused resume leaves the
                directory untouched.
        """
        self.set_aside = tuple(set_aside)
        gone_ns = self.clock.wall_anchor_ns - int(progress["wall_anchor_ns"])
        self.t0 = self.clock.origin_ns - max(0, gone_ns)  # deadlines count from the original start
        self.wall_anchor_ns = int(progress["wall_anchor_ns"])
        self.started = progress.get("started") or self.started
        self.resumed = [*progress.get("resumed", []), utc_now()]
        self.server.ledger.attempt = len(self.resumed) + 1
        self.snapshot_identity = progress.get("snapshot_identity")
        self.snapshot_note = progress.get("snapshot_note")
        self.unread = progress.get("unread_series")
        self.aborted = progress.get("aborted")
        self.keep = dict(keep)
        self.prior = progress
        self.before = dict(progress.get("steps") or {})
        if (origin := progress.get("deadline_origin")) is not None:  # the deadlines counted from the quiesce
            self.origin = origin
            self.t0 = self.clock.origin_ns - max(0, self.clock.wall_anchor_ns - int(origin["wall_ns"]))
        self.known_identities = [i for i in (progress.get("snapshot_identity"), progress.get("identity"))
                                 if i is not None]

    def _from_before(self, st: StepSpec, why: str) -> StepResult | None:
        """A resumed step that is not run again (``why``): what it did before the kill, else None.

        A step that ended then keeps its result; the step the kill cut is ``aborted`` ("interrupted:
        ...; not run again: WHY") with its partial run folder (the ``.interrupted`` one) as ``run_dir``.
        """
        from kvreplay.experiments.history import INTERRUPTED, partial_of

        prev = self.before.get(st.name)
        if prev is None or prev.get("status") == "deferred":
            return None
        if prev.get("status") != "running":
            self.from_before.add(st.name)
            self.say(f"step {st.name}: not run again ({why}); its result from before the kill stands")
            return StepResult.from_json(prev)
        res = StepResult.from_json({**prev, "status": "aborted", "reason": f"{INTERRUPTED}; not run again: {why}"})
        self.from_before.add(st.name)
        moved = self.moved.get(st.dir)
        if st.sends and partial_of(self.out, moved) is not None:
            res.run_dir = moved
        self.say(f"step {st.name}: not run again ({why}); aborted by the kill, its partial run kept")
        return res

    def _how(self) -> str:
        """How this attempt ended (``experiments.history``): interrupted, deadline or completed."""
        if self.interrupted:
            return "interrupted"
        if (self.aborted or {}).get("reason") == "hard_deadline" or any(
                r.status == "deferred" and "stop_new_after" in (r.reason or "") for r in self.results):
            return "deadline"
        return "completed"

    def _attempts_doc(self, steps: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """``attempts`` with this attempt's steps (the results it wrote, not those kept) and stops filled in."""
        if not self.attempts:
            return []
        here = [d for name, d in steps.items() if name not in self.keep and name not in self.from_before]
        self.attempts[-1] = {**self.attempts[-1], "steps": here, "stopped": self.orphans_stopped}
        return self.attempts

    def _progress(self, running: str | None = None) -> None:
        """Rewrite ``progress.json`` (``running``: the step that has started and not ended)."""
        steps = {r.name: {**r.to_json(), **({"status": "running"} if r.name == running else {})}
                 for r in self.results}
        doc = {"experiment_sha256": self.frozen["experiment_sha256"], "started": self.started,
               "updated": utc_now(), "wall_anchor_ns": self.wall_anchor_ns, "resumed": self.resumed,
               "snapshot_identity": self.snapshot_identity, "snapshot_note": self.snapshot_note,
               "identity": self.inc_identity or self.snapshot_identity, "aborted": self.aborted,
               "unread_series": self.unread, "steps": steps, "attempts": self._attempts_doc(steps),
               **({"deadline_origin": self.origin} if self.origin is not None else {})}
        with contextlib.suppress(OSError):  # a full disk must not stop the window; the step logs remain
            write_progress(self.out, doc)

    async def _unread(self) -> dict[str, Any] | None:
        """Series the server exposes that the backend does not read (``experiments.unread``), None if none."""
        from kvreplay.experiments.unread import fetch_metrics_text, unread_series

        if self.server.url is None or self.server.backend_name in ("none", "auto"):
            return None
        text = await asyncio.to_thread(fetch_metrics_text, self.server.url)
        return None if text is None else unread_series(text, self.server.backend_name, self.exp.server.profile)

    def _check_resumed_identity(self, ident: dict[str, Any] | None) -> None:
        """A resumed window refuses a server that is neither the one before the first step nor the last known."""
        if not self.known_identities or ident is None or ident in self.known_identities:
            return
        from kvreplay.runner.identity import identity_changes

        changes = identity_changes(self.known_identities[-1], ident)
        raise ConfigError("the server's identity changed since the window was interrupted: "
                          + ("; ".join(c.describe() for c in changes) or "identity differs")
                          + "; not resumed (start a new window)", path=self.out, field="--resume")

    # -- time ---------------------------------------------------------------------------------
    def elapsed(self) -> float:
        """Seconds since the experiment started."""
        return (now_ns() - self.t0) / 1e9

    def left(self, at: float | None) -> float | None:
        """Seconds from now until ``at`` (s from the start; 0 when past), None for None."""
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
        self.accepted = not self.resumed  # a resumed window writes nothing until the server is accepted
        try:
            if self.exp.server.is_sim:
                await self.server.start_sim(None)
            ident, _snap, err = await self.server.read()
            if self.resumed:
                self._check_resumed_identity(ident)  # before anything on disk changes
                from kvreplay.rundir.experiment import set_aside_step_dir

                moved = {}
                for d in self.set_aside:
                    if (new := set_aside_step_dir(self.out, d)) is not None:
                        moved[d] = new
                        self.say(f"the partial folder {d} is kept as {new}")
                self.moved = moved
                self.attempts = close_killed(prior_attempts(self.prior or {}), self.prior or {}, self.out,
                                             {s["name"]: s.get("dir") for s in self.frozen.get("steps") or []}, moved)
                self.orphans_stopped = await stop_orphans(self)
            else:
                self.snapshot_identity = ident
                if ident is None:
                    self.snapshot_note = f"no identity before the first step ({err or 'no counters adapter'})"
            if ident is not None:
                bad = identity_mismatches(ident, self.exp.server.identity)
                if bad:
                    self.abort("identity_pins", "before the first step: " + "; ".join(bad))
            self.out.mkdir(parents=True, exist_ok=True)
            self.accepted = True  # from here on progress.json is this run's to rewrite
            self.attempts.append({"n": len(self.attempts) + 1, "started": utc_now() if self.resumed else self.started,
                                  "ended": None, "how": "running", "steps": [], "stopped": []})
            if not self.resumed:
                self.unread = await self._unread()
                from kvreplay.experiments.snapshot import freeze_before

                cmds = await freeze_before(self)  # [snapshot]: before anything is taken down
                atomic_write_json(self.out / "snapshot.json", {"identity": ident, "note": self.snapshot_note,
                                                               "unread_series": self.unread,
                                                               **({"commands": cmds} if cmds is not None else {})})
                if self.unread:
                    self.say(f"warning: {self.unread['message']}")
            self._progress()
            for st in self.exp.steps:
                if st.name in self.keep:  # ended before the kill: its result stands
                    self.results.append(self.keep[st.name])
                    continue
                res = StepResult(st.name, st.kind, comparable=st.comparable, label=st.settings.get("label"))
                self.results.append(res)
                if kind_of(st.kind).restores:
                    await self._guarded(st, res)
                    continue
                why = self._why_not(st)
                if why is not None and (prev := self._from_before(st, why)) is not None:
                    self.results[-1] = prev  # what it did before the kill stands (not "deferred")
                    self._progress()
                    continue
                if why is not None:
                    res.status, res.reason = "deferred", why
                    self.say(f"step {st.name}: deferred: {why}")
                    self._progress()
                    continue
                if st.when and not self._condition_holds(st, res):
                    continue
                if (why := self._gate_refusal(st)) is not None:
                    res.status, res.reason = "failed", why
                    self.say(f"step {st.name}: failed: {why}")
                    write_step_log(self.out, st.dir, {"experiment_sha256": self.frozen["experiment_sha256"],
                                                      **res.to_json()})
                    self._progress()
                    continue
                await self._guarded(st, res)
                self._maybe_origin(st, res)
        finally:
            # the incumbent came back (a failed check after it is published, the server kept)
            restored = any(kind_of(r.kind).restores and (r.status == "measured" or r.checks.get("server_restored"))
                           for r in self.results)
            self.closed = await self.server.close(restored=restored)
            for c in self.closed:
                if c.get("stop"):
                    self.say(f"the server (pid {c.get('pid')}) {c['stop']['text']}")
            self.left_running = self._left_running()
            self.ended = utc_now()
            if self.attempts:
                self.attempts[-1].update(how=self._how(), ended=self.ended)
            if self.accepted:  # a refused resume leaves the interrupted window's progress as it was
                self._progress()
        return self.results

    def _left_running(self) -> list[dict[str, Any]] | None:
        """What this window leaves running: the server at the URL, then every other live ledger process.

        The server is ``ServerControl.left_running`` (``command`` and ``why`` added); a restore
        whose check failed names it "restored; check X failed: ...; left running for a person to
        decide". Every other live process of the ledger (``experiments.ledger``: what a start
        command left in the background...) follows with its pid, port, command and why. None
        when nothing is left.
        """
        from kvreplay.experiments.ledger import left_entry, live_entries

        srv = self.exp.server
        ran_cmds = srv.start is not None or srv.restore is not None or any(
            kind_of(st.kind).runs_commands(st) for st in self.exp.steps)
        out: list[dict[str, Any]] = []
        if not srv.is_sim and ran_cmds:
            rs = next((r for r in self.results if kind_of(r.kind).restores), None)
            if rs is not None and rs.status == "measured":
                by = f"the incumbent server restored by step {rs.name}"
            elif rs is not None and rs.checks.get("server_restored"):
                bad: dict[str, Any] = next((g for g in rs.checks.get("restore_checks") or [] if not g.get("ok")), {})
                said = ((bad.get("output") or "").strip().splitlines() or [""])[-1][:200]
                how = (f"timed out after {bad.get('wall_s')} s" if bad.get("timed_out")
                       else f"rc {bad.get('rc')}") + (f": {said}" if said else "")
                by = (f"the incumbent restored by step {rs.name}; check {bad.get('name')} failed ({how}); "
                      "left running for a person to decide") if bad else (
                    f"the incumbent restored by step {rs.name}; {rs.reason}; left running for a person to decide")
            elif rs is not None:
                by = f"a server this window started (restore step {rs.name} {rs.status}: it may not be the incumbent)"
            else:
                by = "a server this window started (no restore step)"
            try:
                got = self.server.left_running(by)
            except OSError:
                got = None
            if got is not None:
                kept = self.server.kept or {}
                out.append({**got, "command": kept.get("cmd") if kept.get("pid") == got.get("pid") else None,
                            "why": by})
        taken = {p for e in out if e.get("pid") is not None for p in (e["pid"],)}
        for e in live_entries(self.out):
            if taken & set(e["alive"]) or e.get("pgid") in taken:
                continue
            out.append(left_entry(e, f"started by this window ({e.get('name')}) and still alive at its end"))
        return out or None

    def _why_not(self, st: StepSpec) -> str | None:
        if self.aborted is not None:
            return f"window aborted: {self.aborted['reason']}"
        stop = self.window.stop_new_after_s
        if stop is not None and self.elapsed() >= stop:
            return f"window: no step starts after stop_new_after = {stop:g} s (elapsed {self.elapsed():.1f} s)"
        starts_server = kind_of(st.kind).starts_server
        if not starts_server and self.blocked is not None:
            return self.blocked
        if not starts_server and self.server.url is None and not self.exp.server.is_sim:
            return "no server: the target needs an incarnation step first ({port} in the URL)"
        return None

    def _maybe_origin(self, st: StepSpec, res: StepResult) -> None:
        """``deadline_from = KIND``: the end of the first measured step of that kind becomes the deadline origin."""
        if (self.origin is not None or self.window.deadline_from != st.kind or res.status != "measured"
                or not kind_of(st.kind).deadline_origin):
            return
        now = now_ns()
        after = (now - self.t0) / 1e9
        self.t0 = now
        self.origin = {"step": st.name, "at": utc_now(), "after_start_s": round(after, 3),
                       "wall_ns": self.clock.wall_anchor_ns + (now - self.clock.origin_ns)}
        w = self.window
        self.say(f"deadlines now count from the end of step {st.name} ({after:.1f} s after the start): "
                 f"stop_new_after +{w.stop_new_after_s} s, hard_deadline +{w.hard_deadline_s} s, "
                 f"restore_reserve {w.restore_reserve_s:g} s")
        self._progress()

    def time_left(self) -> tuple[float | None, str | None]:
        """``(seconds, deadline)`` until ``stop_new_after``, else ``hard_deadline - restore_reserve``; (None, None)."""
        if self.window.stop_new_after_s is not None:
            return self.left(self.window.stop_new_after_s), "stop_new_after"
        if self.window.cancel_at_s is not None:
            return self.left(self.window.cancel_at_s), "cancel_in_flight"
        return None, None

    def _condition_holds(self, st: StepSpec, res: StepResult) -> bool:
        """Evaluate ``st.when`` now (``experiments.conditions``); a false one makes the step ``skipped``."""
        from kvreplay.experiments.conditions import evaluate

        earlier = self.results[:-1]  # the last result is this step's own
        left, until = self.time_left()
        res.condition = evaluate(st.when, time_left_s=left, time_left_until=until,
                                 previous=(earlier[-1].name, earlier[-1].status) if earlier else None,
                                 statuses={r.name: r.status for r in earlier})
        if res.condition["holds"]:
            self.say(f"step {st.name}: condition holds: {' and '.join(res.condition['when'])}")
            return True
        res.status, res.reason = "skipped", "condition false: " + " and ".join(res.condition["false"])
        self.say(f"step {st.name}: skipped: {res.reason}")
        write_step_log(self.out, st.dir, {"experiment_sha256": self.frozen["experiment_sha256"], **res.to_json()})
        self._progress()
        return False

    def _gate_refusal(self, st: StepSpec) -> str | None:
        """``[gates] fixed_bytes``: why a sending step's workload no longer matches its frozen hash, else None."""
        if not (st.sends and self.exp.gates.fixed_bytes):
            return None
        from kvreplay.experiments.gates import fixed_bytes_failure
        from kvreplay.workload import DEFAULT_MAX_BODY_BYTES
        from kvreplay.workload.index import size_of

        frozen_step: dict[str, Any] = next((s for s in self.frozen["steps"] if s["name"] == st.name), {})
        wl = frozen_step.get("workload") or self.frozen.get("workload")
        if not wl or not wl.get("path"):
            return None
        loaded = self.workload_for(st)
        # sizes from the index: a body is not read (one changed on disk would raise before the gate says so)
        biggest = (max((size_of(loaded.bodies, i) for i in range(len(loaded.bodies))), default=0)
                   if loaded is not None else 0)
        return fixed_bytes_failure(wl["path"], wl["sha256"], max_body_bytes=max(DEFAULT_MAX_BODY_BYTES, biggest))

    def workload_for(self, st: StepSpec) -> Workload | None:
        """The bodies ``st`` sends: its own ``workload`` when it names one, else the experiment's."""
        return self.workloads.get(st.name, self.workload)

    async def _guarded(self, st: StepSpec, res: StepResult) -> None:
        kind = kind_of(st.kind)
        res.started = utc_now()
        res.incarnation = self.incarnation
        self.say(f"step {st.name} ({st.kind}) at {self.elapsed():.1f} s")
        (self.out / st.dir).mkdir(parents=True, exist_ok=True)
        self._progress(running=st.name)  # a kill from here on leaves the step "running" on disk
        self.in_restore = kind.restores
        self.current = asyncio.ensure_future(kind.execute(self, st, res))
        # Run and ab steps stop themselves (the runner's and ab's stop_new_after / hard_deadline);
        # an incarnation or a probe (cancel_at_deadline) is cancelled at hard_deadline - restore_reserve;
        # the restore is bounded by its commands and hard_deadline.
        cut = self.left(self.window.cancel_at_s) if kind.cancel_at_deadline else None
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
        self._name_the_death(res)
        res.ended = utc_now()
        if st.sends:
            res.run_dir = st.dir
        write_step_log(self.out, st.dir, {"experiment_sha256": self.frozen["experiment_sha256"], **res.to_json()})
        self._progress()
        self.say(f"step {st.name}: {res.status}" + (f" ({res.reason})" if res.reason else ""))

    def _name_the_death(self, res: StepResult) -> None:
        """A step that failed or was cut while the background server died: its reason says so beside the rest.

        ``"...; the server process (pid N) ended during the step (SIGKILL, rc -9)"``: a transport
        failure alone does not say the server is gone.
        """
        from kvreplay.experiments.ledger import signal_name

        bg = self.server.bg
        if res.status not in ("failed", "aborted") or bg is None or (rc := bg.exited) is None:
            return
        sig = signal_name(rc)
        res.reason = ((res.reason + "; ") if res.reason else "") + (
            f"the server process (pid {bg.proc.pid}) ended during the step ({f'{sig}, ' if sig else ''}rc {rc})")
        res.checks["server_ended"] = {"pid": bg.proc.pid, "rc": rc, "signal": sig}

    def say_stops(self, st: StepSpec, cmds: list[dict[str, Any]]) -> None:
        """One line per server a step stopped: ``stopped gracefully in 0.8 s`` / ``killed after 30 s grace``."""
        for c in cmds:
            if c.get("stop"):
                self.say(f"step {st.name}: the previous server (pid {c.get('pid')}) {c['stop']['text']}")
