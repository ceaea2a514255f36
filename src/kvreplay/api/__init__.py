r"""The Python API: what the command line does, as typed functions (``import kvreplay``).

The CLI's commands are a thin layer over this package: ``kvreplay run`` and
``kvreplay.replay`` run the same code (``kvreplay.api.run``), ``kvreplay probe`` and
``kvreplay.probe`` likewise (``kvreplay.api.probing``), ``kvreplay experiment`` and
``kvreplay.Experiment`` (``kvreplay.api.experiment``), and the offline and one-shot
commands: ``kvreplay.simulate`` / ``simulate_fleet`` (``api.simulation``), ``kvreplay.fit``
(``api.fitting``), ``kvreplay.snapshot`` (``api.snapshots``), ``kvreplay.ab``
(``api.abtest``), ``kvreplay.compare`` (``api.comparison``) and
``kvreplay.inspect_workload`` (``api.inspection``), each returning the dict its command
prints with ``--json`` (typed as a ``TypedDict``); ``kvreplay.record`` (``api.recording``) runs
``kvreplay record``'s proxy until stopped and returns a ``RecordResult``; ``kvreplay.serve_sim``
(``api.serving``) is ``kvreplay serve-sim`` as a context manager giving the URLs;
``kvreplay.write_report`` (``api.reporting``) is ``kvreplay report``. Options have the command
line's names and defaults (``--read-timeout`` is ``read_timeout=``); the simulator's
options go in ``sim={...}`` without their ``sim-`` prefix (``--sim-time-scale 0`` is
``sim={"time_scale": 0}``).

Each entry point has a synchronous form and an ``_async`` form for code that already
runs an event loop (a notebook, an async test). Errors are the command line's:
``ConfigError`` / ``WorkloadError`` for bad input before anything is sent
(exit 2 there), ``BackendError`` for a target that cannot be used.

Example::

    import kvreplay

    r = kvreplay.replay(kvreplay.DEMO_WORKLOAD,
                        phases=["prime:forward:c1:first8", "replay:reverse:c1:first8"],
                        target="sim", sim={"time_scale": 0}, out="runs/api")
    print(r.phase("replay").cached_ratio, r.phase("replay").ttft_ms.p50, r.run_dir)
    verdict = kvreplay.probe(target="sim", sim={"time_scale": 0, "cache_entries": 8}, out="runs/probe")
    result = kvreplay.Experiment.from_file("fixtures/experiments/probe-sizing.toml").run(out="runs/exp")
    curve = kvreplay.simulate(kvreplay.DEMO_WORKLOAD, capacities=[1, 2, 4])
    print(curve["recommended"]["capacity"], kvreplay.inspect_workload(kvreplay.DEMO_WORKLOAD)["expected_reuse"])
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Literal, Unpack

from kvreplay.api.abtest import AbResult, ab, ab_async
from kvreplay.api.comparison import CompareResult, compare
from kvreplay.api.experiment import Experiment, resume_experiment, resume_experiment_async
from kvreplay.api.exporting import export_workload
from kvreplay.api.fitting import FitReport, fit
from kvreplay.api.importing import ImportResult, import_workload
from kvreplay.api.inspection import InspectReport, inspect_workload
from kvreplay.api.recording import RecordResult, record, record_async
from kvreplay.api.reporting import ReportResult, write_report
from kvreplay.api.results import Latency, PhaseResult, RunResult, Tokens
from kvreplay.api.serving import ServedSim, serve_sim, serve_sim_async
from kvreplay.api.simulation import CurvePoint, FleetReport, SimulateReport, simulate, simulate_fleet
from kvreplay.api.snapshots import Snapshot, snapshot, snapshot_async
from kvreplay.api.sweeping import SweepPoint, SweepResult
from kvreplay.bundled import DEMO_WORKLOAD
from kvreplay.errors import BackendError, ConfigError, WorkloadError
from kvreplay.options import RunConfig, RunOptions, SimOptions
from kvreplay.options.probe import ProbeOptions
from kvreplay.rundir import RunData, load_run

__all__ = [
    "DEMO_WORKLOAD",
    "AbResult",
    "BackendError",
    "CompareResult",
    "ConfigError",
    "CurvePoint",
    "Experiment",
    "FitReport",
    "FleetReport",
    "ImportResult",
    "InspectReport",
    "Latency",
    "PhaseResult",
    "ProbeOptions",
    "RecordResult",
    "ReportResult",
    "RunData",
    "RunOptions",
    "RunResult",
    "ServedSim",
    "SimOptions",
    "SimulateReport",
    "Snapshot",
    "SweepPoint",
    "SweepResult",
    "Tokens",
    "WorkloadError",
    "ab",
    "ab_async",
    "compare",
    "demo",
    "demo_async",
    "export_workload",
    "fit",
    "import_workload",
    "inspect_workload",
    "load_run",
    "probe",
    "probe_async",
    "record",
    "record_async",
    "replay",
    "replay_async",
    "resume_experiment",
    "resume_experiment_async",
    "serve_sim",
    "serve_sim_async",
    "simulate",
    "simulate_fleet",
    "snapshot",
    "snapshot_async",
    "sweep",
    "sweep_async",
    "write_report",
]

PathLike = str | os.PathLike[str]
ReportMode = Literal["none", "md", "html"]
_NO_SIM: SimOptions = {}
"""The default ``sim=``: no simulator option (a TypedDict default rather than None, so that a
type checker names a misspelt key of a ``sim={...}`` literal; None is still accepted at run time)."""


def _replay_args(workload: PathLike | None, phases: Iterable[str], plan: PathLike | None, from_plan: PathLike | None,
                 target: str, out: PathLike | None, sim: SimOptions | Mapping[str, Any] | None, report: str,
                 quiet: bool, extra: Mapping[str, Any]) -> RunConfig:
    from kvreplay.api._keywords import config_for

    if isinstance(phases, str):
        raise ConfigError("phases is a list of phase strings, e.g. ['prime:forward:c1']", field="phases")
    values = {"workload": None if workload is None else os.fspath(workload), "phase": list(phases),
              "plan": None if plan is None else os.fspath(plan),
              "from_plan": None if from_plan is None else os.fspath(from_plan),
              "target": target, "out": None if out is None else os.fspath(out), "report": report, "quiet": quiet,
              **extra}
    return config_for(RunConfig, values, sim, declared=_RunKeywords, sim_declared=SimOptions)


class _RunKeywords(RunOptions, total=False):
    """``RunOptions`` plus the explicit parameters of ``replay``, for the run-time check of their types."""

    target: str
    report: ReportMode
    quiet: bool


async def replay_async(workload: PathLike | None = None, *, phases: Iterable[str] = (), plan: PathLike | None = None,
                       from_plan: PathLike | None = None, target: str = "sim", out: PathLike | None = None,
                       sim: SimOptions = _NO_SIM, report: ReportMode = "none", quiet: bool = True,
                       **options: Unpack[RunOptions]) -> RunResult:
    """Replay a workload against a target in a frozen order (``kvreplay run``), in the running event loop.

    Args:
        workload: A folder of ``*.json`` bodies or a ``.jsonl`` file (``DEMO_WORKLOAD``: the
            bundled mtbench-52); optional with ``plan`` or ``from_plan`` naming one.
        phases: ``--phase`` strings in run order, e.g. ``["prime:forward:c1", "replay:reverse:c4"]``.
        plan: A TOML plan file (``--plan``).
        from_plan: An earlier run's plan.json to re-execute exactly (``--from-plan``).
        target: ``"sim"`` (the embedded simulator) or the server's base URL.
        out: The run directory (default ``runs/<UTC timestamp>``); must not hold a run yet.
        sim: Simulator options without the ``sim-`` prefix, e.g. ``{"time_scale": 0}``
            (``SimOptions``: a dict literal type-checks key by key).
        report: ``"none"`` (default: records, summary, histograms), ``"md"`` or ``"html"``.
        quiet: Print no progress (default).
        **options: Any other option of ``kvreplay run`` by its Python name (``RunOptions``: typed,
            durations in float seconds), e.g. ``backend="vllm"``, ``read_timeout=60.0``,
            ``api_key_env="OPENAI_API_KEY"``, ``workers=2``. A misspelt name or a value of the
            wrong type is a type checker's error at the call, and a ``ConfigError`` naming the
            keyword at run time; so is a value the command line refuses (``read_timeout=-1``).

    Returns:
        The run's ``RunResult`` (summary.json typed, and its directory).

    Raises:
        ConfigError, WorkloadError: bad input, before anything is sent (``ConfigError.field``: the
            keyword, ``sim.NAME`` for a simulator option).
        BackendError: the target cannot be used.

    Example::

        r = await kvreplay.replay_async("fixtures/workloads/mtbench-52", phases=["a:forward:c4"])
    """
    from kvreplay.api.run import write_reports_for
    from kvreplay.api.runflow import run_async

    args = _replay_args(workload, phases, plan, from_plan, target, out, sim, report, quiet, options)
    summary = await run_async(args)
    run_dir = summary.pop("_out")
    write_reports_for(args, summary, run_dir)
    return RunResult.from_summary(summary, run_dir)


def replay(workload: PathLike | None = None, *, phases: Iterable[str] = (), plan: PathLike | None = None,
           from_plan: PathLike | None = None, target: str = "sim", out: PathLike | None = None,
           sim: SimOptions = _NO_SIM, report: ReportMode = "none", quiet: bool = True,
           **options: Unpack[RunOptions]) -> RunResult:
    """Replay a workload against a target (``kvreplay run``); blocks until the run ends.

    Takes the arguments of ``replay_async`` and runs it on a fresh event loop (uvloop
    where installed), with a registered API key kept off stdout and stderr. From code
    that already runs an event loop, await ``replay_async`` instead.

    Example::

        r = kvreplay.replay(kvreplay.DEMO_WORKLOAD, phases=["prime:forward:c1:first8",
                            "replay:reverse:c1:first8"], sim={"time_scale": 0})
        assert r.phase("replay").cached_ratio >= 0.9
        print(r.table())

    Raises:
        ConfigError, WorkloadError, BackendError: as ``replay_async``.
    """
    result: RunResult = _run_sync(replay_async(workload, phases=phases, plan=plan, from_plan=from_plan,
                                               target=target, out=out, sim=sim, report=report, quiet=quiet,
                                               **options))
    return result


async def demo_async(*, workload: PathLike | None = None, phases: Iterable[str] = (), target: str = "sim",
                     out: PathLike | None = None, sim: SimOptions = _NO_SIM, report: ReportMode = "none",
                     quiet: bool = True, **options: Unpack[RunOptions]) -> RunResult:
    """The demo (``kvreplay demo``) in the running event loop: ``replay_async`` with the demo's defaults.

    The bundled mtbench-52 primed forward then replayed in reverse (``phases``, ``workload``
    may be given to change them), against the simulator at time scale 0.02 unless ``sim``
    says otherwise (``kvreplay.api.demo_defaults``). Other arguments as ``replay_async``.

    Returns:
        The run's ``RunResult``.

    Raises:
        ConfigError, WorkloadError, BackendError: as ``replay_async``.
    """
    from kvreplay.api.demo_defaults import apply_demo_defaults
    from kvreplay.api.run import write_reports_for
    from kvreplay.api.runflow import run_async

    args = apply_demo_defaults(_replay_args(workload, phases, None, None, target, out, sim, report, quiet, options))
    summary = await run_async(args)
    run_dir = summary.pop("_out")
    write_reports_for(args, summary, run_dir)
    return RunResult.from_summary(summary, run_dir)


def demo(*, workload: PathLike | None = None, phases: Iterable[str] = (), target: str = "sim",
         out: PathLike | None = None, sim: SimOptions = _NO_SIM, report: ReportMode = "none", quiet: bool = True,
         **options: Unpack[RunOptions]) -> RunResult:
    """The demo (``kvreplay demo``); blocks until the run ends. Arguments as ``demo_async``.

    Example::

        r = kvreplay.demo(sim={"time_scale": 0}, out="runs/demo")
        print(r.phase("replay").cached_ratio)
    """
    result: RunResult = _run_sync(demo_async(workload=workload, phases=phases, target=target, out=out, sim=sim,
                                             report=report, quiet=quiet, **options))
    return result


async def probe_async(target: str = "sim", *, out: PathLike | None = None, sim: SimOptions = _NO_SIM,
                      quiet: bool = True, **options: Unpack[ProbeOptions]) -> dict[str, Any]:
    """Probe a server's prefix cache (``kvreplay probe``) in the running event loop.

    Args:
        target: ``"sim"`` or the server's base URL.
        out: The output directory (verdict.json, report.md, requests.jsonl).
        sim: Simulator options without the ``sim-`` prefix.
        quiet: Print no progress (default).
        **options: Any other option of ``kvreplay probe`` by its Python name (``ProbeOptions``), e.g.
            ``sizes="1k,2k"``, ``flush_max=0``, ``backend="vllm"``; each checked as its flag is.

    Returns:
        The verdict as written to verdict.json, with ``"out"`` (the output directory) added.

    Raises:
        ConfigError: a bad option (field: the keyword; ``sim.NAME`` for a simulator option).
        BackendError: the target cannot be used.
    """
    from kvreplay.api._keywords import config_for
    from kvreplay.api.probing import ProbeCommandConfig
    from kvreplay.api.probing import probe_async as run_probe

    values = {"target": target, "out": None if out is None else os.fspath(out), "quiet": quiet, **options}
    config = config_for(ProbeCommandConfig, values, sim, declared=_ProbeKeywords, sim_declared=SimOptions,
                        fleet=False)
    verdict = await run_probe(config)
    verdict["out"] = verdict.pop("_out")
    return verdict


class _ProbeKeywords(ProbeOptions, total=False):
    """``ProbeOptions`` plus the explicit parameters of ``probe``, for the run-time check of their types."""

    target: str
    quiet: bool


def probe(target: str = "sim", *, out: PathLike | None = None, sim: SimOptions = _NO_SIM,
          quiet: bool = True, **options: Unpack[ProbeOptions]) -> dict[str, Any]:
    """Probe a server's prefix cache (``kvreplay probe``); blocks until the verdict is written.

    Example::

        v = kvreplay.probe("sim", sim={"time_scale": 0, "cache_entries": 8}, sizes="1k,2k", flush_max=0)
        print(v["plain"], v["out"])

    Raises:
        ConfigError, BackendError: as ``probe_async``.
    """
    verdict: dict[str, Any] = _run_sync(probe_async(target, out=out, sim=sim, quiet=quiet, **options))
    return verdict


def _loads_text(value: Iterable[float] | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return ",".join(f"{v:g}" for v in value)


async def sweep_async(workload: PathLike, *, concurrency: Iterable[int] | str | None = None,
                      rate: Iterable[float] | str | None = None, target: str = "sim", out: PathLike | None = None,
                      cache: str = "cold", slo: Iterable[str] = (), until: Iterable[str] = (),
                      sim: Mapping[str, Any] | None = None, report: str = "none", quiet: bool = True,
                      **options: Any) -> SweepResult:
    """Sweep a load over points, each an ordinary run (``kvreplay sweep``), in the running event loop.

    Args:
        workload: A folder of ``*.json`` bodies or a ``.jsonl`` file.
        concurrency: Closed-loop loads, e.g. ``[1, 2, 4, 8]``, or ``"auto"`` (search the knee).
        rate: Open-loop loads in requests/s, e.g. ``[1, 2, 4]``, or ``"auto"`` (one of the two).
        target: ``"sim"`` or the server's base URL.
        out: The sweep directory (default ``runs/<UTC timestamp>``); must not exist unless
            ``force=True`` and it holds an earlier sweep.
        cache: ``"cold"`` (default), ``"warm"`` or ``"as-is"``: each point's cache state.
        slo: Per-request SLOs in measured ms, e.g. ``["ttft_ms<=500", "tpot_ms<=50"]``.
        until: Limits that end the sweep, e.g. ``["ttft_ms:p99>2000"]``.
        sim: Simulator options without the ``sim-`` prefix, e.g. ``{"time_scale": 0, "slots": 4}``.
        report: Each point's reports (``"none"``, default, ``"md"`` or ``"html"``; ``"html"`` also
            draws the sweep's report.html).
        quiet: Print nothing (default; a point's progress is in sweep.json as it is written).
        **options: Any other option of ``kvreplay sweep`` or ``kvreplay run`` by its Python name,
            e.g. ``select="first8"``, ``requests=32``, ``warmup=2``, ``arrivals="gamma:2"``, ``csv=True``.

    Returns:
        The ``SweepResult`` (points typed, the knee, sweep.json).

    Raises:
        ConfigError, WorkloadError: bad input, before anything is sent.
        BackendError: the target cannot be used.
    """
    from kvreplay.api._keywords import config_for
    from kvreplay.api.sweeping import SweepConfig, run_sweep

    if isinstance(slo, str) or isinstance(until, str):
        raise ConfigError("slo and until are lists of strings, e.g. ['ttft_ms<=500']", field="slo")
    values = {"workload": os.fspath(workload), "concurrency": _loads_text(concurrency), "rate": _loads_text(rate),
              "target": target, "out": None if out is None else os.fspath(out), "cache": cache, "slo": list(slo),
              "until": list(until), "report": report, "quiet": quiet, **options}
    doc = await run_sweep(config_for(SweepConfig, values, sim))
    return SweepResult.from_document(doc, doc.pop("_out"))


def sweep(workload: PathLike, *, concurrency: Iterable[int] | str | None = None,
          rate: Iterable[float] | str | None = None, target: str = "sim", out: PathLike | None = None,
          cache: str = "cold", slo: Iterable[str] = (), until: Iterable[str] = (),
          sim: Mapping[str, Any] | None = None, report: str = "none", quiet: bool = True,
          **options: Any) -> SweepResult:
    """Sweep a load over points (``kvreplay sweep``); blocks until the last point ends.

    Takes the arguments of ``sweep_async`` and runs it on a fresh event loop.

    Example::

        s = kvreplay.sweep(kvreplay.DEMO_WORKLOAD, concurrency="auto", sim={"time_scale": 0.01, "slots": 4},
                           select="first12", cache="cold", slo=["ttft_ms<=500"], out="sweeps/x")
        print(s.knee, [(p.load, p.goodput_rps, p.cache_verified) for p in s.points])

    Raises:
        ConfigError, WorkloadError, BackendError: as ``sweep_async``.
    """
    return _run_sync(sweep_async(workload, concurrency=concurrency, rate=rate, target=target, out=out, cache=cache,
                                 slo=slo, until=until, sim=sim, report=report, quiet=quiet, **options))


def _run_sync(coro: Any) -> Any:
    """Run a coroutine on a fresh event loop (uvloop where installed), registered secrets off the terminal."""
    from kvreplay.api.run import install_loop
    from kvreplay.redaction import install_streams

    install_loop()
    old = install_streams()
    try:
        return asyncio.run(coro)
    finally:
        sys.stdout, sys.stderr = old
