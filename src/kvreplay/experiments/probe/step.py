"""A ``[[step]]`` of ``kind = "probe"``: ``kvreplay probe`` inside an experiment window.

TOML keys (the options of ``kvreplay probe``, with ``_`` for ``-``; the defaults shown are
``experiments.probe.legs.ProbeConfig``'s, the one place they are set)::

    [[step]]
    name = "P"
    kind = "probe"
    sizes = "8k,16k,32k,64k"        # or [8192, "16k", ...]; k = 1024 tokens
    cold_repeats = 1                # cold legs per size (the fastest is fitted)
    flush_prefix = "8k"             # prefix size of the eviction legs (tokens)
    foreign_tokens = "1k"           # size of each foreign prompt (tokens)
    flush_max = 32                  # upper bound of the eviction bisection (0 = no eviction legs)
    flush_repeats = 2               # repeats per bisection point
    fit_on = "ttft"                 # ttft | stream | server (series fitted for prefill_fit)
    model = "..."                   # model id of the bodies (default: first of /v1/models)
    nonce = "..."                   # fixed nonce prefix (default: random, so no rerun reuses a prefix)
    backend = "halogen"             # counter adapter for this step (default: [server] backend)
    read_timeout = "600s"           # longest silence between two reads
    drain_timeout = "10s"           # bound of the drain check before the first leg
    label = "..."; comparable = true

The probe runs against the current incarnation's URL. It writes the ordinary
probe output directory (``verdict.json``, ``report.md``, ``requests.jsonl``, as
``kvreplay probe --out``) under ``DIR/steps/NN-name/`` and gives
``result.json`` the cells of :data:`PROBE_CELLS`. The method and the verdict's
fields are those of ``kvreplay.experiments.probe.legs``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from kvreplay.clock import now_ns
from kvreplay.errors import ConfigError
from kvreplay.experiments.fields import parse_duration
from kvreplay.experiments.probe.legs import (
    FIT_SOURCES,
    ProbeConfig,
    format_sizes,
    parse_sizes,
    render_report,
    run_probe,
)
from kvreplay.safe_io import JsonlAppender, atomic_write_json, open_jsonl, write_markdown

__all__ = ["PROBE_CELLS", "PROBE_KEYS", "open_requests_log", "probe_cells", "probe_config", "probe_settings",
           "run_probe_step", "write_probe_outputs"]

PROBE_KEYS = frozenset({"sizes", "cold_repeats", "flush_prefix", "foreign_tokens", "flush_max", "flush_repeats",
                        "fit_on", "model", "nonce", "backend", "read_timeout", "drain_timeout", "label",
                        "comparable"})

#: ``(metric, reader of the verdict)``: the cells a probe step contributes to ``result.json``.
#: Fit values are in wall-clock seconds (on the simulator: model seconds x ``sim_time_scale``).
PROBE_CELLS: tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...] = (
    ("prefill_fit.a_s", lambda v: (v.get("prefill_fit") or {}).get("a_s")),
    ("prefill_fit.rate_tokens_per_s", lambda v: (v.get("prefill_fit") or {}).get("rate_tokens_per_s")),
    ("prefill_fit.r2", lambda v: (v.get("prefill_fit") or {}).get("r2")),
    ("cmax_tokens", lambda v: v.get("cmax_tokens")),
    ("bytes_per_token", lambda v: v.get("bytes_per_token")),
    ("min_flush_k", lambda v: v.get("min_flush_k")),
)


def _tokens(value: Any, *, path: Path, line: int | None, fld: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise ConfigError("a token count such as 8k or 8192", path=path, line=line, field=fld)
    try:
        got = parse_sizes(value)
    except ValueError as exc:
        raise ConfigError(str(exc), path=path, line=line, field=fld) from None
    if len(got) != 1:
        raise ConfigError("one token count, not a list", path=path, line=line, field=fld)
    return got[0]


def _int(rest: dict[str, Any], key: str, default: int, low: int, *, path: Path, line: int | None, fld: str) -> int:
    v = rest.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise ConfigError(f"must be an integer >= {low}", path=path, line=line, field=f"{fld}.{key}")
    return v


def probe_settings(rest: dict[str, Any], *, path: Path, line: int | None, fld: str) -> dict[str, Any]:
    """Validate a probe step's keys into JSON-able settings (frozen into ``experiment.json``).

    Args:
        rest: The step's table without ``name``/``kind`` (unknown keys already refused).
        path: The experiment file, for errors.
        line: The step's line in it (None if unknown), for errors.
        fld: The step's field name (like ``step[3]``), for errors.

    Returns:
        ``{"sizes": [tokens...], "cold_repeats", "flush_prefix_tokens", "foreign_tokens",
        "flush_max", "flush_repeats", "fit_on", "model", "nonce", "backend", "read_timeout_s",
        "drain_timeout_s"}``.

    Raises:
        ConfigError: a bad value, naming file, line and field.
    """
    d = ProbeConfig()  # the defaults
    raw = rest.get("sizes", format_sizes(d.sizes))
    if isinstance(raw, list):
        sizes = [_tokens(x, path=path, line=line, fld=f"{fld}.sizes[{i}]") for i, x in enumerate(raw)]
        if not sizes:
            raise ConfigError("no sizes given", path=path, line=line, field=f"{fld}.sizes")
    elif isinstance(raw, str):
        try:
            sizes = list(parse_sizes(raw))
        except ValueError as exc:
            raise ConfigError(str(exc), path=path, line=line, field=f"{fld}.sizes") from None
    else:
        raise ConfigError("sizes is \"8k,16k\" or a list of token counts", path=path, line=line,
                          field=f"{fld}.sizes")
    out: dict[str, Any] = {"sizes": sizes}
    out["cold_repeats"] = _int(rest, "cold_repeats", d.cold_repeats, 1, path=path, line=line, fld=fld)
    out["flush_prefix_tokens"] = _tokens(rest.get("flush_prefix", format_sizes([d.flush_prefix_tokens])), path=path,
                                         line=line, fld=f"{fld}.flush_prefix")
    out["foreign_tokens"] = _tokens(rest.get("foreign_tokens", format_sizes([d.foreign_tokens])), path=path, line=line,
                                    fld=f"{fld}.foreign_tokens")
    out["flush_max"] = _int(rest, "flush_max", d.flush_max, 0, path=path, line=line, fld=fld)
    out["flush_repeats"] = _int(rest, "flush_repeats", d.flush_repeats, 1, path=path, line=line, fld=fld)
    fit_on = rest.get("fit_on", d.fit_on)
    if fit_on not in FIT_SOURCES:
        raise ConfigError(f"must be one of {', '.join(FIT_SOURCES)}, not {fit_on!r}", path=path, line=line,
                          field=f"{fld}.fit_on")
    out["fit_on"] = fit_on
    for key in ("model", "nonce", "backend"):
        v = rest.get(key)
        if v is not None and (not isinstance(v, str) or not v.strip()):
            raise ConfigError("must be a non-empty string", path=path, line=line, field=f"{fld}.{key}")
        out[key] = v
    for key, default in (("read_timeout", d.read_timeout_s), ("drain_timeout", d.drain_timeout_s)):
        out[f"{key}_s"] = parse_duration(rest.get(key, default), path=path, line=line, fld=f"{fld}.{key}")
    return out


def probe_config(settings: dict[str, Any]) -> ProbeConfig:
    """The ``ProbeConfig`` of validated settings (``probe_settings``' result)."""
    return ProbeConfig(sizes=tuple(settings["sizes"]), cold_repeats=settings["cold_repeats"],
                       flush_prefix_tokens=settings["flush_prefix_tokens"],
                       foreign_tokens=settings["foreign_tokens"], flush_max=settings["flush_max"],
                       flush_repeats=settings["flush_repeats"], fit_on=settings["fit_on"],
                       model=settings.get("model"), nonce=settings.get("nonce"),
                       drain_timeout_s=settings["drain_timeout_s"], read_timeout_s=settings["read_timeout_s"])


async def probe_url(url: str, backend_name: str, cfg: ProbeConfig, *, read_timeout_s: float,
                    headers: dict[str, str], profile: str | None, log: Callable[[dict[str, Any]], Any],
                    say: Callable[[str], None], stop_new: Callable[[], bool] | None = None,
                    ) -> tuple[dict[str, Any], str]:
    """Run the probe against ``url`` in a session of its own (``kvreplay probe`` and a probe step).

    Args:
        url: The server's root URL.
        backend_name: Counter adapter; ``auto`` is detected, ``none``/``openai`` read no counters.
        cfg: The probe's settings.
        read_timeout_s: The session's socket read timeout (s); connect 30 s, no total bound.
        headers: Authorization headers (never written).
        profile: Profile for ``prometheus``.
        log: Each leg's record as it completes.
        say: Progress line sink.
        stop_new: True once no new probe request may start (a probe step's stop_new_after).

    Returns:
        ``(verdict, backend)``: ``run_probe``'s verdict and the adapter name used (``auto`` resolved).
    """
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=read_timeout_s)
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
        backend = None
        if backend_name != "none":
            from kvreplay.backends import detect, family, make_backend

            if backend_name == "auto":
                backend_name = await detect(url, session)
            fam = family(backend_name)  # a family without counters (openai): the probe reads none
            backend = (make_backend(backend_name, url, session, profile=profile) if fam is None or fam.counters
                       else None)
        verdict = await run_probe(session, url, backend, cfg, headers=headers, log=log, progress=say,
                                  stop_new=stop_new)
    return verdict, backend_name


async def run_probe_step(*, url: str, backend_name: str, profile: str | None, headers: dict[str, str],
                         settings: dict[str, Any], out_dir: Path, sim_time_scale: float | None,
                         say: Callable[[str], None], stop_new_after_s: float | None = None) -> dict[str, Any]:
    """Run the probe against ``url`` and write its output directory, as ``kvreplay probe --out``.

    ``requests.jsonl`` gets every leg's record as it completes (kept when the step is
    cancelled); ``verdict.json`` and ``report.md`` are written when the probe ends.

    Args:
        url: The current incarnation's root URL.
        backend_name: Counter adapter (``auto`` is detected; ``none``/``openai``: no counters).
        profile: Profile for ``prometheus``.
        headers: Authorization headers (never written).
        settings: ``probe_settings``' result.
        out_dir: ``DIR/steps/NN-name``.
        sim_time_scale: The simulator's time scale when the target is the embedded simulator
            (recorded as ``verdict["sim_time_scale"]``: its fit is in scaled seconds).
        say: Progress line sink.
        stop_new_after_s: Seconds from now after which no new probe request starts (the
            window's ``stop_new_after``); the verdict's ``stopped`` then says what was cut
            (``experiments.probe_cut``). None: no such bound.

    Returns:
        The verdict (``kvreplay.experiments.probe.run_probe``), with ``backend`` and
        ``legs_failed`` (records whose status was not ``ok``: ``[{"leg", "status",
        "http_status", "error"}]``) added.
    """
    cfg = probe_config(settings)
    stop_new = None
    if stop_new_after_s is not None:
        stop_at = now_ns() + int(stop_new_after_s * 1e9)

        def stop_new() -> bool:
            return now_ns() >= stop_at
    name = settings.get("backend") or backend_name
    out_dir.mkdir(parents=True, exist_ok=True)
    failed: list[dict[str, Any]] = []

    def log(rec: dict[str, Any]) -> None:
        fh.write(rec)
        if rec.get("status") != "ok":
            failed.append({k: rec.get(k) for k in ("leg", "status", "http_status", "error")})

    with open_requests_log(out_dir) as fh:
        verdict, name = await probe_url(url, name, cfg, read_timeout_s=settings["read_timeout_s"], headers=headers,
                                        profile=profile, log=log, say=say, stop_new=stop_new)
    verdict["target"] = "sim" if sim_time_scale is not None else url
    if sim_time_scale is not None:
        verdict["sim_time_scale"] = sim_time_scale
    verdict["backend"] = name
    verdict["legs_failed"] = failed
    write_probe_outputs(out_dir, verdict)
    return verdict


def open_requests_log(out_dir: Path) -> JsonlAppender:
    """``out_dir/requests.jsonl``, appended one leg record per line through the output sink.

    Shared by ``kvreplay probe`` and a probe step: secrets redacted, a symlink
    at the name refused, each line written whole (``safe_io.open_jsonl``).

    Raises:
        OSError: the file cannot be opened.
    """
    return open_jsonl(out_dir / "requests.jsonl")


def write_probe_outputs(out_dir: Path, verdict: dict[str, Any]) -> None:
    """Write ``verdict.json`` and ``report.md`` (``render_report``) into ``out_dir`` through the output sink.

    Shared by ``kvreplay probe`` and a probe step: secrets redacted, report
    control characters escaped, each file written atomically.

    Raises:
        OSError: a file cannot be written.
        TypeError: the verdict holds a value JSON cannot represent.
    """
    atomic_write_json(out_dir / "verdict.json", verdict)
    write_markdown(out_dir / "report.md", render_report(verdict))


def _cell_reason(metric: str, verdict: dict[str, Any]) -> tuple[str, str]:
    """(status, reason) of a verdict field that is missing."""
    if metric.startswith("prefill_fit.") and verdict.get("prefill_fit"):
        return "failed", "the fitted slope is not positive: no per-token prefill cost was measurable"
    if metric.startswith("prefill_fit."):
        src = (verdict.get("config") or {}).get("fit_on", "ttft")
        return "failed", f"no prefill fit on the {src} series: needs a first token at two or more distinct sizes"
    if metric == "cmax_tokens":
        return "failed", "the server reported no cached tokens"
    if metric == "bytes_per_token":
        return "absent", "the backend reports no entry or pool bytes"
    return "failed", verdict.get("eviction_note") or "no flushing k found"


def probe_cells(name: str, status: str, reason: str | None, settings: dict[str, Any],
                verdict: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The ``result.json`` cells of one probe step.

    Args:
        name: Step name.
        status: The step's status (measured | failed | deferred | aborted).
        reason: The step's reason.
        settings: The frozen probe settings (``min_flush_k`` is planned only when ``flush_max > 0``).
        verdict: ``verdict.json`` of the step, None when the probe did not finish.

    Returns:
        ``[{"step", "metric", "status", "value", "reason"}]`` in :data:`PROBE_CELLS` order: a
        value's status is the step's (``measured`` with the verdict's value), ``failed`` where the
        verdict lacks it (its reason, e.g. the eviction note), ``absent`` for bytes per token on
        a backend without byte counters; without a verdict every cell takes the step's status
        (``failed`` for a step that was measured yet left no verdict) and reason. A verdict cut
        at ``stop_new_after`` (``stopped``) gives the cells of each leg group cut short
        ``aborted`` (``"partial: 3 of 4 cold legs sent (REASON)"``) or ``deferred`` (``"not run:
        ..."``), never ``measured`` (``experiments.probe_cut.cut_cell``); a group every planned
        leg of which was sent (the cold legs before a cut in the eviction legs) is ``measured``.
    """
    from kvreplay.experiments.probe.cut import cut_cell

    out = []
    stopped = (verdict or {}).get("stopped")
    for metric, read in PROBE_CELLS:
        if metric == "min_flush_k" and not settings.get("flush_max", 1):
            continue
        if verdict is None:
            st = status if status in ("deferred", "aborted", "failed", "not_run", "skipped") else "failed"
            out.append({"step": name, "metric": metric, "status": st, "value": None,
                        "reason": reason or "no verdict.json"})
            continue
        value = read(verdict)
        cut = cut_cell(metric, value, stopped, reason) if isinstance(stopped, dict) else None
        if cut is not None:
            out.append({"step": name, "metric": metric, **cut})
            continue
        # a group complete before the cut is measured, as a run step's phase sent in full
        st_ok, why_ok = ("measured", None) if isinstance(stopped, dict) and status == "aborted" else (status, reason)
        if value is None:
            st, why = _cell_reason(metric, verdict)
            out.append({"step": name, "metric": metric, "status": st, "value": None, "reason": why})
        else:
            out.append({"step": name, "metric": metric, "status": st_ok, "value": value, "reason": why_ok})
    return out
