"""KV pool sizing: the behaviour of ``kvreplay fit`` and ``kvreplay.fit``.

``kvreplay fit`` (``commands/fit.py``) prints the verdict and tables; its options are
``kvreplay.options.fit.FitConfig``; this module reads the boot logs and the probe verdict,
builds the exact ``FitInputs`` of ``kvreplay.offline.fit`` (flags win over a log) and
makes the report (``fit_args``). ``fit`` is the typed entry point. Example::

    kvreplay fit --host-ram-gib 128 --weights-gib 60 --positions 524288 --kv-bytes-per-position 28672
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, TypedDict

from kvreplay.errors import ConfigError
from kvreplay.options.fit import ARENA_BASE_GIB, ARENA_PER_16K_GIB, VISION_GIB, FitConfig

if TYPE_CHECKING:
    from kvreplay.offline.bootlog import BootLog
    from kvreplay.offline.fit import FitInputs

__all__ = [
    "ARENA_BASE_GIB",
    "ARENA_PER_16K_GIB",
    "HOST_RAM_GIB_RANGE",
    "MAX_TOK_NOTE",
    "VISION_GIB",
    "FitConfig",
    "FitReport",
    "fit",
    "fit_args",
    "inputs_from_args",
    "report",
]

PathLike = str | os.PathLike[str]

MAX_TOK_NOTE = "--max-tok not given: "
"""Start of the warning saying which max_tok was used instead (shown first in text)."""

HOST_RAM_GIB_RANGE = (1, 16384)
"""Host RAM outside this range (GiB) is a unit mistake, not a machine (issue 29)."""


class FitReport(TypedDict, total=False):
    """The report of ``kvreplay fit --json`` (GiB are binary gigabytes, 2**30 bytes).

    ``verdict`` is ``fits``, ``clamped`` (the server lowers the pool to ``positions``),
    ``floor`` (the pool stays at the context) or ``no_boot``; ``knife_edge`` is true when
    ``|headroom_gib| <= noise_gib``. ``budget_gib`` = host RAM - weights - reserve;
    ``need_gib`` = ``kv_gib`` + ``fixed_gib`` (arena + vision, or the printed need's);
    ``max_reserve_gib`` the largest reserve at which the asked pool fits. ``pools``,
    ``reserves`` and ``arenas`` are the three tables; ``warnings`` how the inputs were
    read. With ``from_log``: ``logs`` (each boot log read) and with two, ``footprint``.
    With logs only (no host RAM or KV bytes), only ``logs`` and ``footprint`` are present.
    """

    budget_gib: float
    need_gib: float
    margin_gib: float
    verdict: str
    knife_edge: bool
    noise_gib: float
    positions: int
    requested_positions: int
    printed_at_max_tok: int | None
    max_tok: int
    arena_shift_gib: float
    host_ram_gib: float
    kv_bytes_per_position: float
    kv_gib: float
    fixed_gib: float
    headroom_gib: float
    need_source: str
    max_reserve_gib: float
    warnings: list[str]
    pools: list[dict[str, Any]]
    reserves: list[dict[str, Any]]
    arenas: list[dict[str, Any]]
    logs: list[dict[str, Any]]
    footprint: dict[str, Any]


def _probe_bytes(path: str, *, accept_entry_bytes: bool = False) -> Fraction:
    """``bytes_per_token`` measured by ``kvreplay probe`` (its verdict.json).

    A prompt cache's bytes per token (halogen's ``last_entry_bytes`` slope, e.g.
    2,674) is what a *snapshot* costs per prompt token, not what the KV pool
    holds per position (e.g. 28 KiB): it is refused unless
    ``accept_entry_bytes``.

    Raises:
        ConfigError: unreadable file, a verdict without a positive measurement,
            or a prompt-cache figure not accepted.
    """
    from kvreplay.offline.fit import to_fraction

    try:
        with open(path, "rb") as f:
            data = json.load(f)
        value = data.get("bytes_per_token")
    except (OSError, ValueError, AttributeError) as exc:
        raise ConfigError(f"cannot read probe verdict: {exc}", path=path) from exc
    kind = data.get("bytes_per_token_kind")
    method = data.get("bytes_per_token_method") or ""
    is_entry = kind == "prompt_cache_entry" or (
        kind is None and isinstance(method, str) and "last_entry_bytes" in method
    )
    if is_entry and not accept_entry_bytes and value:
        raise ConfigError(
            f"this verdict's bytes_per_token ({value}) is a prompt-cache snapshot's bytes per"
            " prompt token, not the KV pool's bytes per position; pass --probe-bytes-are-kv"
            " if they are the same on this server, or give --kv-bytes-per-position",
            path=path,
            field="bytes_per_token",
        )
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ConfigError(
            "the probe measured no bytes per token (the server reports no entry or pool bytes)",
            path=path,
            field="bytes_per_token",
        )
    return to_fraction(repr(value), field="bytes_per_token")


def inputs_from_args(
    args: FitConfig, log: BootLog | None = None
) -> tuple[FitInputs, list[str]]:
    """Build the sizing inputs from parsed flags (and a boot log's figures).

    Flags win over the log; the log supplies weights, reserve, the printed need,
    the ``max_tok`` it was printed at and the requested pool where not given.

    Returns:
        ``(inputs, warnings)``; the warnings are about how the inputs were read.

    Raises:
        ConfigError: a value that is not a number, a missing input, or no way
            to get KV bytes.
    """
    from kvreplay.offline.fit import KIB_PER_GIB, FitInputs, kv_bytes_per_position, parse_printed_need, to_fraction

    notes: list[str] = []
    if args.memtotal_kb is not None:
        host = to_fraction(args.memtotal_kb, field="memtotal-kb") / KIB_PER_GIB
        from_memtotal = True
    elif args.host_ram_gib is not None:
        host = to_fraction(args.host_ram_gib, field="host-ram-gib")
        from_memtotal = False
    else:
        raise ConfigError("give --host-ram-gib or --memtotal-kb", field="host-ram-gib")
    ways = [
        flag
        for flag, given in (
            ("--kv-bytes-per-position", args.kv_bytes_per_position is not None),
            ("--probe-verdict", args.probe_verdict is not None),
            ("--layers/--kv-heads/--head-dim", any(
                v is not None for v in (args.layers, args.kv_heads, args.head_dim)
            )),
        )
        if given
    ]
    if len(ways) > 1:
        raise ConfigError(
            f"give KV bytes per position one way, not {' and '.join(ways)}",
            field=ways[0].lstrip("-"),
        )
    if args.kv_bytes_per_position is not None:
        kvb = to_fraction(args.kv_bytes_per_position, field="kv-bytes-per-position")
    elif args.probe_verdict is not None:
        kvb = _probe_bytes(args.probe_verdict, accept_entry_bytes=args.probe_bytes_are_kv)
    elif args.layers is not None and args.kv_heads is not None and args.head_dim is not None:
        kvb = kv_bytes_per_position(
            layers=args.layers, kv_heads=args.kv_heads, head_dim=args.head_dim, dtype=args.kv_dtype
        )
    else:
        raise ConfigError(
            "give --kv-bytes-per-position, --probe-verdict, or --layers, --kv-heads and --head-dim",
            field="kv-bytes-per-position",
        )
    weights = args.weights_gib
    if weights is None and log is not None and log.weights_gib is not None:
        weights = repr(log.weights_gib)
    if weights is None:
        raise ConfigError("give --weights-gib (or a --from-log with a weights line)", field="weights-gib")
    reserve = args.reserve_gib
    if reserve is None:
        reserve = repr(log.reserve_gib) if log is not None and log.reserve_gib is not None else "0"
    positions = args.positions
    if positions is None and log is not None:
        positions = log.requested_positions
    if positions is None:
        raise ConfigError("give --positions (or a --from-log with a reserving line)", field="positions")
    printed = parse_printed_need(args.printed_need) if args.printed_need else None
    printed_at = args.printed_at_max_tok
    if printed is None and log is not None and log.printed_need_gib is not None:
        printed = parse_printed_need(f"{log.printed_need_gib!r}@{log.requested_positions}")
        if printed_at is None:
            printed_at = log.printed_at_max_tok
        notes.append(
            f"printed need {log.printed_need_gib} GiB at {log.requested_positions} positions"
            f" read from {log.path}"
            + (f" (printed at max_tok {printed_at})" if printed_at is not None else "")
        )
    max_tok, max_tok_note = _resolve_max_tok(args.max_tok, log, printed_at, printed is not None)
    if max_tok_note:
        notes.insert(0, max_tok_note)
    if printed is not None and printed_at is None:
        printed_at = max_tok
        notes.append(
            f"printed need taken as printed at --max-tok {max_tok}: pass"
            " --printed-at-max-tok N if the engine printed it at another max_tok"
            " (a wrong max_tok moves the arena by 8.40 GiB per 16384 tokens)"
        )
    vision = VISION_GIB if args.vision else args.vision_gib
    inp = FitInputs(
        host_ram_gib=host,
        host_ram_from_memtotal=from_memtotal,
        weights_gib=to_fraction(weights, field="weights-gib"),
        reserve_gib=to_fraction(reserve, field="reserve-gib"),
        positions=positions,
        kv_bytes_per_position=kvb,
        max_tok=max_tok,
        arena_base_gib=to_fraction(args.arena_base_gib, field="arena-base-gib"),
        arena_per_16k_gib=to_fraction(args.arena_per_16k_gib, field="arena-per-16k-gib"),
        vision_gib=to_fraction(vision, field="vision-gib"),
        margin_gib=to_fraction(args.margin_gib, field="margin-gib"),
        ctx=args.ctx,
        printed_need=printed,
        printed_at_max_tok=printed_at,
        noise_gib=to_fraction(args.noise_gib, field="noise-gib"),
        position_step=args.position_step,
    )
    notes += _unit_checks(inp, args)
    if printed is None and inp.vision_gib == 0:
        notes.append(
            f"no vision tower counted: pass --vision ({VISION_GIB} GiB, halogen's) or"
            " --vision-gib if the model has one on"
        )
    if inp.arena_shift_gib:
        notes.append(
            f"printed need moved from max_tok {printed_at} to {max_tok}: arena"
            f" {float(inp.arena_shift_gib):+.3f} GiB (slope {float(inp.arena_per_16k_gib):g} GiB"
            " per 16384 tokens)"
        )
    if printed is not None and printed.margin_gib is not None and printed.margin_gib != inp.margin_gib:
        notes.append(
            f"the engine printed a margin of {float(printed.margin_gib):g} GiB;"
            f" --margin-gib is {float(inp.margin_gib):g}"
        )
    return inp, notes


MIN_KV_BYTES_PER_POSITION = 256
"""Bytes per position under which ``--kv-bytes-per-position`` is taken for KiB (bytes): no
real model is that small (1 layer x 1 KV head of 64 dimensions x 1 byte, fp8, x 2 for K and
V is already 128, and real models have tens of layers); the seed's "28 KiB" typed as 28."""


def _unit_checks(inp: FitInputs, args: FitConfig) -> list[str]:
    """Plausibility of the units (issue 29): an error where the verdict would be meaningless.

    Errors: host RAM outside ``HOST_RAM_GIB_RANGE`` (MiB typed as GiB, MemTotal in bytes
    typed as kB); a printed need below its own KV part (a negative fixed part, e.g. bytes
    per position in the wrong unit). Warning: weights above host RAM.

    Raises:
        ConfigError: naming the flag and the likely unit mistake.
    """
    from kvreplay.offline.fit import KIB_PER_GIB

    lo, hi = HOST_RAM_GIB_RANGE
    host = inp.host_ram_gib
    if not lo <= host <= hi:
        if inp.host_ram_from_memtotal:
            guess = f"bytes? ({float(host * KIB_PER_GIB) / (1 << 30):.4g} GiB read as bytes)" if host > hi else "MiB?"
            raise ConfigError(
                f"MemTotal {args.memtotal_kb} kB is {float(host):.6g} GiB, outside {lo}-{hi} GiB:"
                f" in {guess} /proc/meminfo gives kB",
                field="memtotal-kb",
            )
        guess = (f"MiB? ({float(host) / 1024:.4g} GiB)" if host > hi else f"TiB? ({float(host) * 1024:.4g} GiB)")
        raise ConfigError(
            f"host RAM {args.host_ram_gib} GiB is outside {lo}-{hi} GiB: in {guess}", field="host-ram-gib"
        )
    if args.kv_bytes_per_position is not None and inp.kv_bytes_per_position < MIN_KV_BYTES_PER_POSITION:
        kvb = inp.kv_bytes_per_position
        raise ConfigError(
            f"{float(kvb):g} bytes per position is below any real model's {MIN_KV_BYTES_PER_POSITION}"
            f" (1 layer, 1 KV head of 64, fp8, K+V): in KiB? ({float(kvb):g} KiB = {float(kvb * 1024):g} bytes)",
            field="kv-bytes-per-position",
        )
    if inp.reserve_gib > host:
        raise ConfigError(
            f"reserve {float(inp.reserve_gib):g} GiB exceeds host RAM {float(host):g} GiB:"
            f" in MiB? ({float(inp.reserve_gib) / 1024:.4g} GiB)",
            field="reserve-gib",
        )
    if inp.printed_need is not None and inp.printed_need.need_gib > host:
        need = inp.printed_need.need_gib
        raise ConfigError(
            f"the printed need {float(need):g} GiB exceeds host RAM {float(host):g} GiB:"
            f" in MiB? ({float(need) / 1024:.4g} GiB)",
            field="printed-need",
        )
    if inp.printed_need is not None and inp.fixed_gib < 0:
        kv = inp.kv_gib(inp.printed_need.positions)
        raise ConfigError(
            f"the printed need {float(inp.printed_need.need_gib):g} GiB at {inp.printed_need.positions}"
            f" positions is below its own KV part ({float(kv):.3f} GiB at"
            f" {float(inp.kv_bytes_per_position):g} bytes per position): a fixed part of"
            f" {float(inp.fixed_gib):.3f} GiB means a unit is wrong; check the KV bytes per position"
            " (bytes per position, not per block) against the server",
            field="printed-need",
        )
    notes = []
    if inp.weights_gib > host:
        notes.append(
            f"weights {float(inp.weights_gib):g} GiB exceed host RAM {float(host):g} GiB:"
            " --weights-gib in MiB?"
        )
    return notes


def _resolve_max_tok(
    given: int | None, log: BootLog | None, printed_at: int | None, printed: bool
) -> tuple[int, str | None]:
    """The ``max_tok`` (tokens) the fit runs at, and a note when it was not given.

    Order: ``--max-tok``; the boot log's ``reserving ... at max_tok N``; the
    printed need's ``--printed-at-max-tok``; 0 under the formula alone.

    Raises:
        ConfigError: a printed need is used and no ``max_tok`` is known (field
            ``max-tok``): the printed figure holds for one max_tok only.
    """
    if given is not None:
        return given, None
    if log is not None and log.printed_at_max_tok is not None:
        return log.printed_at_max_tok, (
            f"{MAX_TOK_NOTE}using the log's max_tok {log.printed_at_max_tok}"
            f" ({log.path}); pass --max-tok N for another"
        )
    if printed and printed_at is not None:
        return printed_at, (
            f"{MAX_TOK_NOTE}using --printed-at-max-tok {printed_at};"
            " pass --max-tok N for another"
        )
    if printed:
        raise ConfigError(
            "give --max-tok N (the max_tok the server runs at): a printed need holds for the"
            " max_tok it was printed at, and neither --printed-at-max-tok nor a boot log names one",
            field="max-tok",
        )
    return 0, None


def report(inp: FitInputs, reserves: list[Fraction], notes: list[str] | None = None) -> dict[str, Any]:
    """The full JSON report: verdict fields, then the tables.

    ``verdict`` is ``fits | clamped | floor | no_boot``; ``knife_edge`` (bool)
    is separate (``|headroom_gib| <= noise_gib``).
    """
    from kvreplay.offline.fit import arena_table, fit_pool, pool_table, reserve_table

    res = fit_pool(inp)
    return {
        "budget_gib": float(res.budget_gib),
        "need_gib": float(res.need_gib),
        "margin_gib": float(res.margin_gib),
        "verdict": res.verdict,
        "knife_edge": res.knife_edge,
        "noise_gib": float(res.noise_gib),
        "positions": res.positions,
        "requested_positions": res.requested_positions,
        "printed_at_max_tok": inp.printed_at_max_tok if inp.printed_need is not None else None,
        "max_tok": inp.max_tok,
        "arena_shift_gib": float(res.arena_shift_gib),
        "host_ram_gib": float(inp.host_ram_gib),
        "kv_bytes_per_position": float(inp.kv_bytes_per_position),
        "kv_gib": float(res.kv_gib),
        "fixed_gib": float(res.fixed_gib),
        "headroom_gib": float(res.headroom_gib),
        "need_source": res.need_source,
        "max_reserve_gib": float(res.max_reserve_gib),
        "warnings": [*(notes or []), *res.warnings],
        "pools": pool_table(inp),
        "reserves": reserve_table(inp, reserves),
        "arenas": arena_table(inp),
    }


def fit_args(args: FitConfig) -> dict[str, Any]:
    """Run ``kvreplay fit`` on parsed options: the report, or the boot logs' figures alone.

    With ``--from-log`` only (no host RAM or KV bytes), the result holds what the log(s)
    say (``logs``, and ``footprint`` with two); otherwise the full ``FitReport``.

    Raises:
        ConfigError: more than two logs, a missing or implausible input (naming its flag).
    """
    from kvreplay.offline.bootlog import compare_footprints, read_boot_log
    from kvreplay.offline.fit import to_fraction

    if len(args.from_log) > 2:
        raise ConfigError("--from-log takes one or two files", field="from-log")
    logs = [read_boot_log(p) for p in args.from_log]
    log_part: dict[str, Any] = {}
    if logs:
        log_part["logs"] = [lg.to_json() for lg in logs]
        if len(logs) == 2:
            log_part["footprint"] = compare_footprints(logs[0], logs[1])
    have_kv = any(
        v is not None
        for v in (args.kv_bytes_per_position, args.probe_verdict, args.layers)
    )
    if logs and (args.host_ram_gib is None and args.memtotal_kb is None or not have_kv):
        return log_part
    inp, notes = inputs_from_args(args, logs[0] if logs else None)
    if args.reserves:
        items = args.reserves.split(",") if isinstance(args.reserves, str) else args.reserves
        reserves = [to_fraction(x.strip() if isinstance(x, str) else x, field="reserves")
                    for x in items if not isinstance(x, str) or x.strip()]
    else:
        top = int(inp.reserve_gib) + 4
        reserves = [Fraction(r) for r in range(0, top + 1)]
    return report(inp, reserves, notes) | log_part


def fit(*, host_ram_gib: str | float | None = None, memtotal_kb: str | int | None = None,
        weights_gib: str | float | None = None, positions: int | None = None,
        kv_bytes_per_position: str | float | None = None, probe_verdict: PathLike | None = None,
        from_log: Sequence[PathLike] = (), max_tok: int | None = None, printed_need: str | None = None,
        reserves: Sequence[str | float] | None = None, **options: Any) -> FitReport:
    """Will this KV pool and arena fit in host RAM, or be silently clamped? (``kvreplay fit``).

    Exact arithmetic: numbers given as decimal strings (``"0.1"``) are read exactly;
    floats are taken at their binary value. Options have the command line's names and
    defaults (``--arena-base-gib`` is ``arena_base_gib=``, ``--vision`` is ``vision=True``).

    Args:
        host_ram_gib: Host RAM (GiB); or ``memtotal_kb``, MemTotal of /proc/meminfo (kB = KiB).
        memtotal_kb: See ``host_ram_gib`` (give one).
        weights_gib: Resident weights (GiB; default: from the boot log).
        positions: The requested KV pool (positions; default: from the boot log).
        kv_bytes_per_position: KV bytes per position; or ``probe_verdict``, or
            ``layers=``, ``kv_heads=``, ``head_dim=`` (and ``kv_dtype=``) in ``**options``.
        probe_verdict: A probe verdict.json whose measured ``bytes_per_token`` is used.
        from_log: One or two halogen boot logs (two: their held footprints compared).
        max_tok: Tokens the arena is sized for (default: the log's, else the printed need's).
        printed_need: The server's own printed need, ``"GIB@POSITIONS"``.
        reserves: Reserves (GiB) for the reserve table (default 0 to reserve+4 by 1).
        **options: Any other option of ``kvreplay fit`` by its Python name.

    Returns:
        The report as ``kvreplay fit --json`` prints it (``FitReport``).

    Raises:
        ConfigError: a missing input, two ways of giving KV bytes, an implausible unit
            (host RAM outside 1-16384 GiB), an unreadable log or verdict.

    Example::

        rep = kvreplay.fit(host_ram_gib="128", weights_gib="60", positions=524288,
                           kv_bytes_per_position="28672", max_tok=16384)
        print(rep["verdict"], rep["headroom_gib"], rep["positions"])
    """
    if "json" in options:
        raise ConfigError("unknown option 'json'", field="json")
    named = {"host_ram_gib": host_ram_gib, "memtotal_kb": memtotal_kb, "weights_gib": weights_gib,
             "positions": positions, "kv_bytes_per_position": kv_bytes_per_position,
             "probe_verdict": None if probe_verdict is None else os.fspath(probe_verdict), "max_tok": max_tok,
             "printed_need": printed_need,
             "reserves": None if reserves is None else list(reserves)}
    values = {k: v for k, v in named.items() if v is not None} | {"from_log": [os.fspath(p) for p in from_log]}
    from kvreplay.api._keywords import config_for

    rep: FitReport = fit_args(config_for(FitConfig, values | options))  # type: ignore[assignment]
    return rep
