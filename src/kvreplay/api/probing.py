"""Probe a server's cache (the behaviour of ``kvreplay probe`` and ``kvreplay.probe``).

``kvreplay probe`` (``commands/probe.py``) prints; its options are
``kvreplay.options.probe.ProbeCommandConfig`` (the flags derive from it, ``kvreplay.probe``'s
keywords build it); this module runs the probe (``probe_async``). Examples::

    kvreplay probe --target http://127.0.0.1:8000 --sizes 8k,16k,32k,64k --out runs/probe
    kvreplay probe --target sim --sim-cache-entries 8 --sim-time-scale 0 --out runs/probe-sim

Writes ``verdict.json``, ``report.md`` and ``requests.jsonl`` (one line per leg
request) into ``--out``. See ``kvreplay.experiments.probe.legs`` for the method.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreplay.api.run import default_out, read_api_key, split_credentials
from kvreplay.errors import ConfigError
from kvreplay.experiments.probe.legs import ProbeConfig, plain_line
from kvreplay.experiments.probe.step import open_requests_log, probe_url, write_probe_outputs
from kvreplay.options.probe import ProbeCommandConfig
from kvreplay.safe_io import echo

__all__ = ["ProbeCommandConfig", "config_from_args", "probe_async"]


def config_from_args(args: ProbeCommandConfig) -> ProbeConfig:
    """What the probe measures, from its options (checked when the flags or keywords were read).

    Raises:
        ConfigError: a bound ``ProbeConfig`` refuses.
    """
    try:
        return ProbeConfig(sizes=tuple(args.sizes), cold_repeats=args.cold_repeats,
                           flush_prefix_tokens=args.flush_prefix, foreign_tokens=args.foreign_tokens,
                           flush_max=args.flush_max, flush_repeats=args.flush_repeats, fit_on=args.fit_on,
                           model=args.model)
    except ValueError as exc:
        raise ConfigError(str(exc), field="probe") from exc


async def probe_async(args: ProbeCommandConfig | object) -> dict[str, Any]:
    """Start the simulator if asked, run the probe, write the output directory.

    Args:
        args: The probe's options (``ProbeCommandConfig``; an older caller's object of parsed
            flags by their ``dest`` is read into one).

    Returns:
        The verdict (as written to verdict.json), with ``_out`` added.

    Raises:
        ConfigError: a bad option or backend, or an ``--out`` that already holds ``verdict.json``
            or ``requests.jsonl`` (an earlier probe), before anything is written.
    """
    if not isinstance(args, ProbeCommandConfig):
        args = ProbeCommandConfig.from_dests(vars(args))
    cfg = config_from_args(args)
    sim_cfg = None
    if args.target == "sim":  # checked before anything is written
        from kvreplay.sim.cache_entries import check_entry_cap
        from kvreplay.sim.config import config_and_calibration_of

        sim_cfg = config_and_calibration_of(args.sim, flag_prefix="--sim-")[0]
        check_entry_cap(sim_cfg.max_entry_bytes, sim_cfg.bytes_per_token, field="sim-max-entry-bytes")
    api_key = read_api_key(args)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    from kvreplay.api.runflow.checks import check_backend

    check_backend(args.backend, args.profile)  # before the output directory is made
    out = Path(args.out) if args.out else default_out()
    # requests.jsonl is appended to: a second probe into the folder mixed its legs with the first's
    for name in ("verdict.json", "requests.jsonl"):
        if (out / name).exists():
            raise ConfigError(f"directory already holds {name}; choose a new --out", path=out, field="--out")
    out.mkdir(parents=True, exist_ok=True)
    backend_name = args.backend
    sim = None
    if sim_cfg is not None:
        from kvreplay.sim import SimServer

        sim = SimServer(sim_cfg)
        await sim.start(host="127.0.0.1", port=0)
        url = label = sim.base_url
        if backend_name == "auto":
            backend_name = "halogen"
    else:
        # URL credentials: an Authorization header, registered as secrets, never written (as in run).
        url, label = split_credentials(args.target, headers)
    say = (lambda _m: None) if args.quiet else (lambda m: echo(f"probe: {m}"))
    fh = open_requests_log(out)  # the output sink: redacted, O_NOFOLLOW; closed below
    try:
        verdict, backend_name = await probe_url(url, backend_name, cfg, read_timeout_s=args.read_timeout,
                                                headers=headers, profile=args.profile, log=fh.write, say=say)
    finally:
        fh.close()
        if sim is not None:
            await sim.stop()
    verdict["target"] = "sim" if sim is not None else label
    if sim is not None:
        # The simulator's delays are model seconds x time_scale: the fit is in scaled seconds.
        # Readers (simulate --prefill verdict.json) divide it back out.
        verdict["sim_time_scale"] = sim.config.time_scale
        verdict["plain"] = plain_line(verdict)  # with the model seconds of the scale
    verdict["backend"] = backend_name
    if args.target_prefix:
        from kvreplay.experiments.probe.sizing import target_prefix_statement

        verdict["target_prefix"] = target_prefix_statement(verdict, args.target_prefix)
    write_probe_outputs(out, verdict)  # the output sink, as a probe step
    verdict["_out"] = str(out)
    return verdict
