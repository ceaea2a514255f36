"""A/B repetitions: two arms, blocks in an alternating order frozen before the first request.

An *arm* is a name and a command that switches the server to that arm
(``--arm off=CMD --arm on=CMD``); the first arm is the baseline. A *block* is
one execution of the same frozen plan (phases C1 and C4 by default, each
preceded by a drain) against the server in one arm. With R repetitions the
blocks run in the order ``A B, B A, A B, ...`` (rep r is ``A B`` when r is even),
so a slow drift of the machine falls on both arms alike; the order, the arms and
the inner plan's hash are written to ``ab.json`` before the first request.

Before each block: the arm's command runs (``/bin/sh -c CMD`` through
``runner.usercmd``: its own session and process group, stdin from /dev/null,
stdout and stderr to ``commands/NN-ARM.log``, bounded by ``cmd_timeout_s``, the
whole group killed on a timeout; it returns when the shell exits, so a
``./switch.sh`` that starts the new server with ``&`` does not hold the
experiment; exit status, duration and the log's tail go to ``ab.json``), then a
readiness check must pass (``GET /health``, else ``/v1/models``, answering 200
within ``ready_timeout_s``). The block is a normal run directory
(``blocks/NN-ARM/``) made by the runner, whose identity and counters are read
afresh at its start: a changed build string between blocks is expected, while
a change *inside* a block aborts it (the runner's identity-drift check), and an
aborted block stops the experiment (later blocks are recorded as deferred).

**Simulator arms.** With ``--target sim`` an arm's command is a simulator
configuration instead: ``sim:KEY=VALUE,...`` over the ``--sim-*`` options,
where KEY is a ``SimConfig`` field (``prefill_base_s=1.672``) or
``prefill_scale=F`` (prefill ``F`` times slower: ``a * F`` and ``rate / F``).
Each block then starts a fresh simulator with that configuration, whose build
string is ``<build>+<arm>``, and stops it after the block. ``replicas=N`` and ``router=POLICY``
make the arm a fleet instead (``experiments.ab.fleet``: N simulated replicas behind
the embedded router, each block a fleet run with ``phases[].routing_loss``).

**Deadlines and bounds.** ``stop_new_after_s`` and ``hard_deadline_s`` count from
the experiment's start (before the first arm command): each block runs with what
is left of them (the runner's deadlines), a block that would start after
``stop_new_after_s`` is deferred, and the experiment then stops (exit 3). The
runner's ``abort_if`` bounds, identity pins, ``abort_on_malformed`` and
``on_check_fail`` apply inside every block (``contract``). The comparison says
how many repetitions were measured against how many were planned.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp

from kvreplay.clock import now_ns
from kvreplay.errors import ConfigError
from kvreplay.experiments.ab.fleet import FLEET_KEYS, arm_fleet, fleet_backend, fleet_run_options, start_arm_fleet
from kvreplay.plan import PhaseSpec, Plan
from kvreplay.redaction import register_urls_in
from kvreplay.runner.usercmd import run_user_command
from kvreplay.safe_io import atomic_write_json, write_markdown

__all__ = ["Arm", "block_order", "block_phase_specs", "parse_arm", "parse_select", "sim_arm_config", "wait_ready"]


@dataclass(frozen=True, slots=True)
class Arm:
    """One arm.

    Attributes:
        name: Arm name (letters, digits, ``_.-``).
        cmd: Shell command run before each of its blocks (``""`` = none), or
            ``sim:...`` for a simulator configuration.
    """

    name: str
    cmd: str

    @property
    def is_sim(self) -> bool:
        """The command is a simulator configuration."""
        return self.cmd.startswith("sim:") or self.cmd == "sim"


def parse_arm(text: str) -> Arm:
    """Parse ``NAME=CMD`` (CMD may be empty).

    Raises:
        ConfigError: no ``=`` or a bad name.
    """
    name, sep, cmd = text.partition("=")
    name = name.strip()
    if not sep or not name or not all(c.isalnum() or c in "_.-" for c in name):
        raise ConfigError(
            f"{text!r}: expected NAME=CMD with a name of letters, digits, '_', '.', '-'",
            field="--arm",
        )
    try:
        register_urls_in(cmd)  # a URL's credentials in the switch command: in no output (redaction)
    except ValueError as exc:
        raise ConfigError(f"credentials in a URL of arm {name}: {exc}", field="--arm") from None
    return Arm(name, cmd.strip())


def parse_select(text: str, *, field: str = "--select") -> str:
    """``ab --select``: ``all``, ``firstN`` / ``lastN`` (as ``--phase``'s tokens) or ``first:N`` / ``last:N``.

    Returns:
        The plan's selection: ``"all"``, ``"first:N"`` or ``"last:N"`` (``first8`` -> ``"first:8"``).

    Raises:
        ConfigError: anything else, or N < 1 (naming ``field``).
    """
    t = text.strip().lower()
    if t == "all":
        return t
    m = re.fullmatch(r"(first|last):?(\d+)", t)
    if not m or int(m.group(2)) < 1:
        raise ConfigError(f"{text!r}: expected all, firstN or lastN with N >= 1 (e.g. first8)", field=field)
    return f"{m.group(1)}:{int(m.group(2))}"


def block_phase_specs(text: str, order: str, select: str | list[int] | tuple[int, ...] = "all", *,
                      field: str = "--phases") -> list[PhaseSpec]:
    """A block's phases: ``c1,c4`` -> phases named c1 and c4 at those concurrencies, each after a drain.

    Args:
        text: Comma-separated ``cN`` tokens (spaces and empty tokens ignored).
        order: Every phase's order (``forward``, ``reverse``, ``shuffle:SEED``, ``by-prefix``).
        select: Every phase's selection (``all``, ``first:N``, ``last:N`` or body indices).
        field: Where the text came from, for errors (``--phases``, ``step[2].phases``).

    Raises:
        ConfigError: a token that is not cN with N >= 1, no token at all, or a bad
            order or selection (naming ``field``).
    """
    specs = []
    for tok in filter(None, (t.strip() for t in text.split(","))):
        m = re.fullmatch(r"c(\d+)", tok)
        if not m or int(m.group(1)) < 1:
            raise ConfigError(f"{tok!r}: phases are concurrencies like c1,c4", field=field)
        specs.append(PhaseSpec.from_mapping({"name": tok, "order": order, "concurrency": int(m.group(1)),
                                             "drain": True, "select": select}, where={"field": field}))
    if not specs:
        raise ConfigError("no phases", field=field)
    return specs


def block_order(arms: list[Arm], reps: int) -> list[dict[str, Any]]:
    """The alternating block order: rep r runs ``A B`` when r is even, ``B A`` when odd.

    Returns:
        ``[{"block": i, "rep": r, "arm": name, "dir": "blocks/NN-name"}, ...]``.

    Raises:
        ConfigError: not exactly two arms (with distinct names), or reps < 1.
    """
    if len(arms) != 2 or arms[0].name == arms[1].name:
        raise ConfigError(
            "an A/B experiment needs exactly two arms with distinct names", field="--arm"
        )
    if reps < 1:
        raise ConfigError("repetitions must be >= 1", field="--reps")
    out: list[dict[str, Any]] = []
    for r in range(reps):
        pair = arms if r % 2 == 0 else arms[::-1]
        for arm in pair:
            i = len(out)
            out.append({"block": i, "rep": r, "arm": arm.name, "dir": f"blocks/{i:02d}-{arm.name}"})
    return out


def _scalar(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def sim_arm_config(base: Any, arm: Arm) -> Any:
    """The simulator configuration of a ``sim:KEY=VALUE,...`` arm over ``base`` (a ``SimConfig``).

    ``prefill_scale=F`` multiplies ``prefill_base_s`` by F and divides
    ``prefill_tokens_per_s`` by F (every prefill F times as long). The build
    string becomes ``<base build>+<arm name>``.

    Raises:
        ConfigError: a malformed item or an unknown or bad setting.
    """
    from kvreplay.sim import SimConfig

    spec = arm.cmd[4:] if arm.cmd.startswith("sim:") else ""
    data: dict[str, Any] = {}
    scale = 1.0
    for item in filter(None, (s.strip() for s in spec.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"arm {arm.name}: {item!r} is not KEY=VALUE", field="--arm")
        if key.strip() in FLEET_KEYS:  # the arm's fleet (experiments.ab.fleet), not a SimConfig field
            continue
        if key.strip().replace("-", "_") == "prefill_scale":
            scale = float(value)
            if scale <= 0:
                raise ConfigError(f"arm {arm.name}: prefill_scale must be > 0", field="--arm")
            continue
        data[key.strip()] = _scalar(value.strip())
    cfg = SimConfig.from_mapping(data, where=f"--arm {arm.name}", base=base) if data else base
    return replace(
        cfg,
        prefill_base_s=cfg.prefill_base_s * scale,
        hit_prefill_base_s=cfg.hit_prefill_base_s * scale,
        prefill_tokens_per_s=cfg.prefill_tokens_per_s / scale,
        build=f"{cfg.build}+{arm.name}",
    )


async def run_arm_command(cmd: str, timeout_s: float, *, name: str = "arm", log_dir: Path | None = None,
                          on_spawn: Callable[[int, str, str], object] | None = None) -> dict[str, Any]:
    """Run an arm's shell command through ``runner.usercmd.run_user_command`` (module docstring).

    Args:
        cmd: The shell line; ``""`` runs nothing.
        timeout_s: Bound (s); the command's process group is killed past it.
        name: Log name (``NN-ARM``): the log is ``log_dir/NAME.log``.
        log_dir: Where logs go (``<experiment>/commands``); a temporary place when None.
        on_spawn: Called with ``(pid, name, cmd)`` as the command starts (an experiment's
            process ledger, ``experiments.ledger``).

    Returns:
        ``UserCommandResult.to_json()`` plus ``cmd`` and ``rc`` (the exit status, None on a
        timeout) and ``wall_s`` (the duration), the keys ``ab.json`` had before.
    """
    if not cmd:
        return {"cmd": "", "rc": 0, "wall_s": 0.0, "exit_status": 0, "timed_out": False,
                "duration_s": 0.0, "log_path": None, "log_tail": ""}
    if log_dir is None:
        import tempfile

        log_dir = Path(tempfile.mkdtemp(prefix="kvreplay-arm-"))
    def noted(pid: int) -> None:
        if on_spawn is not None:
            on_spawn(pid, name, cmd)

    res = await run_user_command(cmd, name=name, log_dir=log_dir, timeout_s=timeout_s, on_spawn=noted)
    return {**res.to_json(), "cmd": cmd, "rc": res.exit_status, "wall_s": res.duration_s}


async def wait_ready(
    url: str, headers: dict[str, str], *, timeout_s: float = 60.0, interval_s: float = 0.5
) -> dict[str, Any]:
    """Poll ``/health`` (else ``/v1/models``) until one answers 200, bounded by ``timeout_s`` (s).

    Returns:
        ``{"ready", "waited_s", "endpoint", "last_error"}``.
    """
    t0 = now_ns()
    deadline = t0 + int(timeout_s * 1e9)
    last = None
    timeout = aiohttp.ClientTimeout(total=max(1.0, min(10.0, timeout_s)))
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            for path in ("/health", "/v1/models"):
                try:
                    async with session.get(url.rstrip("/") + path, headers=headers) as resp:
                        if resp.status == 200:
                            return {
                                "ready": True,
                                "waited_s": round((now_ns() - t0) / 1e9, 3),
                                "endpoint": path,
                                "last_error": None,
                            }
                        last = f"{path}: HTTP {resp.status}"
                except (aiohttp.ClientError, TimeoutError) as exc:
                    last = f"{path}: {type(exc).__name__}: {exc}"
            if now_ns() >= deadline:
                return {
                    "ready": False,
                    "waited_s": round((now_ns() - t0) / 1e9, 3),
                    "endpoint": None,
                    "last_error": last,
                }
            await asyncio.sleep(interval_s)


BlockRunner = Callable[[dict[str, Any], Arm, Path], Awaitable[dict[str, Any]]]
"""Runs one block: ``(block, arm, block_dir) -> summary`` (already switched and ready)."""


def ab_document(
    arms: list[Arm],
    reps: int,
    plan: Plan,
    order: list[dict[str, Any]],
    *,
    target: str,
    backend: str,
    thresholds: dict[str, list[str]],
) -> dict[str, Any]:
    """``ab.json`` as written before the first request."""
    return {
        "format": "kvreplay-ab/1",
        "arms": [{"name": a.name, "cmd": a.cmd, "baseline": i == 0} for i, a in enumerate(arms)],
        "reps": reps,
        "plan_sha256": plan.sha256,
        "phases": [
            {"name": p.name, "concurrency": p.spec.concurrency, "requests": len(p.sequence)}
            for p in plan.phases
        ],
        "order": order,
        "target": target,
        "backend": backend,
        "thresholds": thresholds,
        "blocks": [],
    }


def quote_cmd(cmd: str) -> str:
    """The command as one shell-quoted word (for messages)."""
    return shlex.quote(cmd)


async def run_ab(
    *,
    workload: Any,
    plan: Plan,
    arms: list[Arm],
    reps: int,
    out: Path,
    target: str,
    backend_name: str,
    thresholds: list[Any],
    target_label: str | None = None,
    sim_base: Any = None,
    profile: str | None = None,
    headers: dict[str, str] | None = None,
    seed: int = 0,
    ready_timeout_s: float = 60.0,
    cmd_timeout_s: float = 600.0,
    drain_timeout_s: float = 10.0,
    progress: Callable[[str], None] | None = None,
    stop_new_after_s: float | None = None,
    hard_deadline_s: float | None = None,
    abort_if: tuple[tuple[str, str, float], ...] = (),
    contract: dict[str, Any] | None = None,
    sim_calibration: dict[str, Any] | None = None,
    replicas: tuple[Any, ...] = (),
    fleet_options: dict[str, Any] | None = None,
    accept_busy_host: float | None = None,
    on_spawn: Callable[[int, str, str], object] | None = None,
) -> dict[str, Any]:
    """Run every block in the frozen order, then compare (see module docstring).

    Args:
        workload: The ``Workload`` every block replays.
        plan: The frozen plan of one block (the same for all).
        arms: Baseline first.
        reps: Repetitions (pairs).
        out: Experiment directory (``ab.json``, ``blocks/``, ``compare.json``, ``compare.md``).
        target: Server URL without credentials, or ``sim`` (arms are then simulator configurations).
        target_label: The target as written to ab.json and each block's plan.json
            (``commands.run.split_credentials``' redacted URL); None = ``target``.
        backend_name: Counter adapter name, ``auto`` or ``none``.
        thresholds: ``compare.Threshold`` checks.
        sim_base: Base ``SimConfig`` for ``--target sim``.
        profile: Profile for the prometheus adapter.
        headers: Request headers (Authorization).
        seed: Bootstrap seed.
        ready_timeout_s: Readiness bound after an arm switch (s).
        cmd_timeout_s: Bound of an arm's command (s).
        drain_timeout_s: Drain bound before each phase (s).
        progress: One line per step.
        stop_new_after_s: No request sent after this long from the experiment's start (s).
        hard_deadline_s: Requests in flight cancelled at this point (s from the start).
        abort_if: The runner's counter bounds, ``(name, op, value)``, in every block.
        contract: ``RunOptions`` fields ``identity_pins``, ``abort_on_malformed``,
            ``on_check_fail`` for every block.
        sim_calibration: With ``target == "sim"``, the calibration that set ``sim_base``
            (``sim.config.config_and_calibration``: ``--sim-from-verdict``), or None. Kept
            as ``kvreplay run`` keeps it: in ``ab.json`` (``sim_calibration``), in each
            block's ``plan.json`` (``run.sim_calibration``) and in each arm's simulator
            ``/version``.
        replicas: A fleet target behind ``target`` (the router; an experiment's ``[fleet]``):
            ``runner.fleet.Replica`` values whose adapters every block reads
            (``backends.fleet``); empty: one server.
        fleet_options: The ``RunOptions`` fields of that fleet (``replicas``,
            ``replica_header``, ``fleet_json``: ``runner.fleet.fleet_run_fields``).
        accept_busy_host: ``--accept-busy-host``'s factor for the comparison
            (``compare.compare_blocks``), kept in ab.json so that ``kvreplay compare``
            redoes it; None = timing decisions on a busy host are withheld.
        on_spawn: Called with ``(pid, name, cmd)`` as each arm command starts
            (``run_arm_command``; an experiment's process ledger).

    Against the simulator each block's ``plan.json`` records its arm's time scale
    (``run.sim_time_scale``, as ``kvreplay run --target sim``), so the block reports give
    latencies in model ms with the scale stated; ``ab.json`` has ``sim_time_scale``
    (arm -> scale).

    Returns:
        The comparison (as written to ``compare.json``), with ``ab`` = the final ab.json.

    Raises:
        ConfigError: a non-sim arm with ``--target sim``, or a sim arm with a URL target.
    """
    from kvreplay.experiments.ab.compare import compare_blocks, load_pairs, render_compare
    from kvreplay.report.markdown import render_markdown
    from kvreplay.runner import RunOptions, execute_plan
    from kvreplay.runner.observer import CallbackObserver

    say = progress or (lambda _m: None)
    hdrs = dict(headers or {})
    is_sim = target == "sim"
    for a in arms:
        if is_sim and a.cmd and not a.is_sim:
            raise ConfigError(
                f"arm {a.name}: with --target sim an arm is 'sim:KEY=VALUE,...'", field="--arm"
            )
        if not is_sim and a.is_sim:
            raise ConfigError(f"arm {a.name}: a 'sim:' arm needs --target sim", field="--arm")
    sim_cfgs = {a.name: sim_arm_config(sim_base, a) for a in arms} if is_sim else {}
    fleets = {a.name: arm_fleet(a.cmd[4:], a.name) for a in arms if a.cmd.startswith("sim:")} if is_sim else {}
    order = block_order(arms, reps)
    by_name = {a.name: a for a in arms}
    out.mkdir(parents=True, exist_ok=True)
    if (out / "ab.json").exists():
        raise ConfigError("directory already holds ab.json; choose a new --out", path=out)
    doc = ab_document(
        arms,
        reps,
        plan,
        order,
        target=target_label or target,
        backend=backend_name,
        thresholds={
            "primary": [t.text for t in thresholds if t.role == "primary"],
            "protected": [t.text for t in thresholds if t.role == "protected"],
        },
    )
    doc["limits"] = {
        "stop_new_after_s": stop_new_after_s,
        "hard_deadline_s": hard_deadline_s,
        "abort_if": [f"{n}{op}{v:g}" for n, op, v in abort_if],
        "cmd_timeout_s": cmd_timeout_s,
        "identity_pins": [p.to_json() for p in (contract or {}).get("identity_pins", ())],
    }
    if accept_busy_host is not None:
        doc["accept_busy_host"] = accept_busy_host
    if is_sim:
        doc["sim_time_scale"] = {a.name: sim_cfgs[a.name].time_scale for a in arms}
        if sim_calibration is not None:
            doc["sim_calibration"] = sim_calibration
    atomic_write_json(out / "ab.json", doc)  # frozen before the first request
    stopped: str | None = None
    t0 = now_ns()
    for blk in order:
        arm = by_name[blk["arm"]]
        rec: dict[str, Any] = {k: blk[k] for k in ("block", "rep", "arm", "dir")}
        if stopped is not None:
            rec.update(deferred=True, reason=stopped)
            doc["blocks"].append(rec)
            continue
        elapsed_s = (now_ns() - t0) / 1e9
        if stopped is None and stop_new_after_s is not None and elapsed_s >= stop_new_after_s:
            stopped = f"deadline: no new requests after {stop_new_after_s:g} s (block {blk['block']} not started)"
        if stopped is None and hard_deadline_s is not None and elapsed_s >= hard_deadline_s:
            stopped = f"hard deadline of {hard_deadline_s:g} s passed (block {blk['block']} not started)"
        if stopped is not None:
            rec.update(deferred=True, reason=stopped)
            doc["blocks"].append(rec)
            continue
        srv = None
        if is_sim:
            from kvreplay.sim import SimServer

            fleet_size = fleets.get(arm.name)
            if fleet_size is not None:  # router policies as arms: the embedded fleet (experiments.ab.fleet)
                srv = await start_arm_fleet(sim_cfgs[arm.name], fleet_size, sim_calibration)
                url = srv.router_url
                fleet_kw = fleet_run_options(srv, sim_cfgs[arm.name], fleet_size)
            else:
                srv = SimServer(sim_cfgs[arm.name], calibration=sim_calibration)
                await srv.start(host="127.0.0.1", port=0)
                url = srv.base_url
                fleet_kw = {}
            rec["switch"] = {"cmd": arm.cmd, "rc": 0, "sim_build": sim_cfgs[arm.name].build}
        else:
            url = target
            bound = cmd_timeout_s
            if hard_deadline_s is not None:
                bound = max(0.001, min(bound, hard_deadline_s - elapsed_s))
            rec["switch"] = await run_arm_command(arm.cmd, bound, name=Path(blk["dir"]).name,
                                                  log_dir=out / "commands", on_spawn=on_spawn)
        try:
            if rec["switch"]["rc"] != 0:
                sw = rec["switch"]
                why = f"timed out after {bound:g} s" if sw.get("timed_out") else f"rc {sw['rc']}"
                tail = (sw.get("log_tail") or "").strip().splitlines()[-1:] or [""]
                stopped = (f"block {blk['block']}: arm command failed ({why})"
                           + (f": {tail[0][:200]}" if tail[0] else ""))
                rec.update(deferred=True, reason=stopped)
                doc["blocks"].append(rec)
                continue
            rec["ready"] = await wait_ready(url, hdrs, timeout_s=ready_timeout_s)
            if not rec["ready"]["ready"]:
                stopped = f"block {blk['block']}: not ready after the arm switch ({rec['ready']['last_error']})"
                rec.update(deferred=True, reason=stopped)
                doc["blocks"].append(rec)
                continue
            chosen = {"name": backend_name}
            fleet_kw = fleet_kw if is_sim else dict(fleet_options or {})
            sim_fleet = fleet_kw.pop("sim_fleet", None)

            async def factory(
                session: aiohttp.ClientSession, _url: str = url, _chosen: dict = chosen,
                _replicas: tuple[str, ...] = fleet_kw.get("replicas", ()),
            ) -> Any:
                if _chosen["name"] == "none":
                    return None
                if replicas and not is_sim:  # [fleet]: every replica's adapter, never the router's
                    from kvreplay.backends.fleet import open_fleet_backend

                    return await open_fleet_backend(replicas, _chosen["name"], profile, session)
                if _replicas:
                    return await fleet_backend(_replicas, session)
                from kvreplay.backends import detect, make_backend

                if _chosen["name"] == "auto":
                    _chosen["name"] = "halogen" if is_sim else await detect(_url, session)
                return make_backend(_chosen["name"], _url, session, profile=profile)

            say(f"block {blk['block']} (rep {blk['rep']}, arm {arm.name})")
            elapsed_s = (now_ns() - t0) / 1e9
            left = {k: (None if v is None else max(0.001, v - elapsed_s))
                    for k, v in (("stop_new_after_s", stop_new_after_s), ("hard_deadline_s", hard_deadline_s))}
            summary = await execute_plan(
                plan,
                plan.bind(workload),
                RunOptions(
                    target_url=url,
                    target_label="sim" if is_sim else (target_label or url),
                    out_dir=out / blk["dir"],
                    backend_name=backend_name,
                    headers=hdrs,
                    drain_timeout_s=drain_timeout_s,
                    drain_interval_s=0.1,
                    quiet=True,
                    abort_if=tuple(abort_if),
                    elapsed_before_s=elapsed_s,
                    # as `kvreplay run --target sim` (commands.run.sim_run_extra): the scale, and
                    # the calibration from --sim-from-verdict, in the block's plan.json
                    run_extra=({"sim_time_scale": sim_cfgs[arm.name].time_scale}
                               | ({"sim_calibration": sim_calibration} if sim_calibration is not None else {})
                               | ({"sim_fleet": sim_fleet} if sim_fleet is not None else {})
                               if is_sim else {}),
                    stop_new_after_s=left["stop_new_after_s"],
                    hard_deadline_s=left["hard_deadline_s"],
                    **(contract or {}),
                    **fleet_kw,
                ),
                backend_factory=factory,
                observer=None if progress is None else CallbackObserver(
                    lambda m: say(f"  {m}"), sim_cfgs[arm.name].time_scale if is_sim else None),
                render_report=render_markdown,
            )
        finally:
            if srv is not None:
                await srv.stop()
        if fleet_kw:  # phases[].routing_loss of the block (offline.runloss), in its summary and report.md
            from kvreplay.offline.runloss import add_routing_loss
            from kvreplay.rundir import read_plan, write_report_md, write_summary

            if add_routing_loss(out / blk["dir"], summary, plan=plan, workload=workload):
                write_summary(out / blk["dir"], summary)
                write_report_md(out / blk["dir"], render_markdown(summary, read_plan(out / blk["dir"])))
        ident = summary.get("identity") or {}
        rec.update(
            aborted=summary.get("aborted"),
            identity=ident.get("before"),
            plan_sha256=summary.get("plan_sha256"),
        )
        if summary.get("aborted"):
            stopped = f"block {blk['block']} aborted: {summary['aborted'].get('reason')}"
        doc["blocks"].append(rec)
        atomic_write_json(out / "ab.json", doc)
    doc["stopped"] = stopped
    atomic_write_json(out / "ab.json", doc)
    pairs, arm_names = load_pairs([out])
    result = compare_blocks(pairs, thresholds, seed=seed, reps_planned=reps, accept_busy_host=accept_busy_host)
    if stopped:
        result["reasons"].insert(0, stopped)
    atomic_write_json(out / "compare.json", result)
    md = render_compare(result, arm_names)
    from kvreplay.report.abreport import ab_sim_lines

    if sim_lines := ab_sim_lines(doc):  # the scale and calibration, after the verdict (as report.html)
        title, verdict_line, rest = md.split("\n\n", 2)
        md = "\n\n".join([title, verdict_line, "\n".join(
            f"- {'Simulator calibration: ' if k == 'calibration' else ''}{t}" for k, t in sim_lines), rest])
    write_markdown(out / "compare.md", md)
    result["ab"] = doc
    return result
