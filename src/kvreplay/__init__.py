"""kvreplay: replay exact retained request bodies against LLM inference servers.

It sends the bodies in a frozen order at a fixed concurrency, streams every
response through a native SSE accountant, and records prefill vs decode latency
beside the server's own prefix-cache counters.

The Python API (``kvreplay.api``) is reached from here lazily, so ``import kvreplay``
stays light (``kvreplay --help`` imports neither numpy nor the accountant):
``kvreplay.replay(...)``, ``kvreplay.probe(...)``, ``kvreplay.Experiment``,
``kvreplay.load_run(path)``, ``kvreplay.simulate``, ``fit``, ``snapshot``, ``ab``,
``compare``, ``inspect_workload``, ``record``, ``serve_sim``, ``write_report`` and the
typed results (``RunResult``, ``PhaseResult``, ``SimulateReport``...).
"""

__version__ = "0.1.0"

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
    "__version__",
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

# Type checkers read the real names here (mypy and pyright both treat a name TYPE_CHECKING as
# true); at run time it is False and the names come lazily through __getattr__ below, so
# `import kvreplay` imports neither typing nor kvreplay.api.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from kvreplay.api import (
        DEMO_WORKLOAD,
        AbResult,
        BackendError,
        CompareResult,
        ConfigError,
        CurvePoint,
        Experiment,
        FitReport,
        FleetReport,
        ImportResult,
        InspectReport,
        Latency,
        PhaseResult,
        ProbeOptions,
        RecordResult,
        ReportResult,
        RunData,
        RunOptions,
        RunResult,
        ServedSim,
        SimOptions,
        SimulateReport,
        Snapshot,
        Tokens,
        WorkloadError,
        ab,
        ab_async,
        compare,
        demo,
        demo_async,
        export_workload,
        fit,
        import_workload,
        inspect_workload,
        load_run,
        probe,
        probe_async,
        record,
        record_async,
        replay,
        replay_async,
        resume_experiment,
        resume_experiment_async,
        serve_sim,
        serve_sim_async,
        simulate,
        simulate_fleet,
        snapshot,
        snapshot_async,
        write_report,
    )


def __getattr__(name: str) -> object:  # no typing import: `kvreplay --help` starts light
    if name in __all__:
        from kvreplay import api

        return getattr(api, name)
    raise AttributeError(f"module 'kvreplay' has no attribute {name!r}")
