"""Probe a server's cache (the behaviour of ``kvreplay probe`` and ``kvreplay.probe``).

``kvreplay probe`` (``commands/probe.py``) prints; this module declares the options
(``add_arguments``) and runs the probe (``probe_async``). Examples::

    kvreplay probe --target http://127.0.0.1:8000 --sizes 8k,16k,32k,64k --out runs/probe
    kvreplay probe --target sim --sim-cache-entries 8 --sim-time-scale 0 --out runs/probe-sim

Writes ``verdict.json``, ``report.md`` and ``requests.jsonl`` (one line per leg
request) into ``--out``. See ``kvreplay.experiments.probe.legs`` for the method.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kvreplay.api.run import add_target_arguments, default_out, read_api_key, split_credentials
from kvreplay.argtypes import integer, number, tokens
from kvreplay.errors import ConfigError
from kvreplay.experiments.probe.legs import (
    FIT_SOURCES,
    ProbeConfig,
    format_sizes,
    parse_sizes,
    plain_line,
)
from kvreplay.experiments.probe.step import open_requests_log, probe_url, write_probe_outputs
from kvreplay.safe_io import echo

__all__ = ["add_arguments", "config_from_args", "probe_async"]

def _sizes(text: str | tuple[int, ...]) -> tuple[int, ...]:
    """``--sizes``: ``8k,16k,...`` checked at parse time (``parse_sizes``); a tuple passes."""
    if isinstance(text, tuple):
        return text
    try:
        return parse_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, got {text!r}") from None


def _one_size(value: str | int, minimum: int = 16) -> int:
    """A size flag's tokens, whether argparse's type already parsed it or not."""
    return value if isinstance(value, int) else tokens(minimum)(value)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``probe``'s options (plus the target options of ``run``)."""
    d = ProbeConfig()  # the defaults: ProbeConfig's, shared with a probe step's TOML keys
    p.add_argument(
        "--sizes", type=_sizes, default=format_sizes(d.sizes), help="cold/warm leg sizes in tokens (k = 1024)"
    )
    p.add_argument(
        "--cold-repeats", type=integer(1), default=d.cold_repeats,
        help="cold legs per size (the fastest is fitted)",
    )
    p.add_argument("--flush-prefix", type=tokens(16), default=format_sizes([d.flush_prefix_tokens]),
                   help="prefix size of the eviction legs (tokens)")
    p.add_argument("--foreign-tokens", type=tokens(16), default=format_sizes([d.foreign_tokens]),
                   help="size of each foreign prompt (tokens)")
    p.add_argument(
        "--flush-max",
        type=integer(0),
        default=d.flush_max,
        metavar="K",
        help="upper bound of the eviction bisection (0 = skip eviction legs)",
    )
    p.add_argument("--flush-repeats", type=integer(1), default=d.flush_repeats, help="repeats per bisection point")
    p.add_argument(
        "--fit-on",
        choices=FIT_SOURCES,
        default=d.fit_on,
        help="series for prefill_fit: ttft (send to first token), stream (headers to first "
        "token), server (timings.prompt_ms)",
    )
    p.add_argument(
        "--model", default=None, help="model id for the bodies (default: first of /v1/models)"
    )
    p.add_argument("--out", default=None, help="output directory (default runs/<UTC timestamp>)")
    p.add_argument(
        "--read-timeout",
        type=number(0, strict=True, unit="s"),
        default=d.read_timeout_s,
        metavar="S",
        help="longest silence allowed between two reads (s); a cold 64k prefill can be long",
    )
    p.add_argument(
        "--target-prefix",
        type=tokens(1),
        default=None,
        metavar="TOKENS",
        help="state whether Cmax covers a prefix of this size (e.g. 24k)",
    )
    p.add_argument("--quiet", action="store_true", help="print no progress (the output directory holds everything)")
    add_target_arguments(p)


def config_from_args(args: argparse.Namespace) -> ProbeConfig:
    """The probe configuration from parsed options.

    The numbers were checked when the flags were parsed (``kvreplay.argtypes``).

    Raises:
        ConfigError: a bad size or bound (from a caller that did not parse the flags).
    """
    try:
        return ProbeConfig(
            sizes=_sizes(args.sizes),
            cold_repeats=args.cold_repeats,
            flush_prefix_tokens=_one_size(args.flush_prefix),
            foreign_tokens=_one_size(args.foreign_tokens),
            flush_max=args.flush_max,
            flush_repeats=args.flush_repeats,
            fit_on=args.fit_on,
            model=args.model,
        )
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise ConfigError(str(exc), field="probe") from exc


async def probe_async(args: argparse.Namespace) -> dict[str, Any]:
    """Start the simulator if asked, run the probe, write the output directory.

    Returns:
        The verdict (as written to verdict.json), with ``_out`` added.
    """
    cfg = config_from_args(args)
    sim_cfg = None
    if args.target == "sim":  # checked before anything is written
        from kvreplay.sim import config_from_args as sim_config
        from kvreplay.sim.cache_entries import check_entry_cap

        sim_cfg = sim_config(args, prefix="sim-")
        check_entry_cap(sim_cfg.max_entry_bytes, sim_cfg.bytes_per_token, field="sim-max-entry-bytes")
    api_key = read_api_key(args)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    out = Path(args.out) if args.out else default_out()
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

        verdict["target_prefix"] = target_prefix_statement(
            verdict, _one_size(args.target_prefix, 1)
        )
    write_probe_outputs(out, verdict)  # the output sink, as a probe step
    verdict["_out"] = str(out)
    return verdict
