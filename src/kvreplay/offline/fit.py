"""Will this KV pool and arena fit in host RAM, or will the server clamp it?

The rule (DESIGN.md, question 5; issue 7)::

    budget = host_ram - weights - reserve                      (GiB)
    kv     = positions * kv_bytes_per_position / 2**30          (GiB)
    arena  = arena_base + arena_per_16k * max_tok / 16384       (GiB)
    need   = kv + arena + vision                                (GiB)
    fits   <=>  budget >= need + margin

A pool that does not fit is lowered, never raised, to the largest size that
fits, but never below the context length (its floor). When the fixed part of
the need (arena + vision) alone exceeds the budget, the server will not boot.

Where the server printed its own requirement for one pool size
(``--printed-need GIB@POSITIONS``), that figure replaces the model at that size:
``need(P) = printed_gib + (P - printed_positions) * kv_bytes_per_position / 2**30``,
so the printed figure anchors the line and the KV bytes per position give its
slope; the implied fixed part ``printed_gib - printed_positions * kv`` takes the
place of arena + vision in the no-boot test. A printed figure is tied to the
``max_tok`` it was printed at (``printed_at_max_tok``); at another ``max_tok`` the
fixed part moves by the arena slope:
``+ arena_per_16k * (max_tok - printed_at_max_tok) / 16384`` (issue 18: a 35.0 GiB
figure printed at max_tok 32768 is 51.8 GiB at 65536, which will not boot, not a
clamp).

Verdicts: ``fits`` (pool unchanged), ``clamped`` (lowered to the largest fitting
pool), ``floor`` (the clamp stopped at the context length: the pool is ``ctx``,
or unchanged when it is already at or below ``ctx``; the margin is eaten) and
``no_boot``. ``knife_edge`` is a separate flag: ``|headroom| <= noise_gib``
(default 0.25 GiB), i.e. a verdict that a weights figure off by the noise would
flip.

All arithmetic is exact (``fractions.Fraction`` built from the decimal strings
given), so a pool on the boundary fits and one byte over it does not; values
are turned into floats only for output. 1 GiB = 2**30 bytes; MemTotal from
``/proc/meminfo`` is in kB meaning KiB (1024 bytes, see proc(5)).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction

from kvreplay.errors import ConfigError

__all__ = [
    "DEFAULT_MARGIN_GIB",
    "DEFAULT_NOISE_GIB",
    "DTYPE_BYTES",
    "FitInputs",
    "FitResult",
    "PrintedNeed",
    "arena_table",
    "fit_pool",
    "kv_bytes_per_position",
    "parse_printed_need",
    "pool_table",
    "reserve_table",
    "to_fraction",
]

GIB = 1 << 30
"""Bytes per GiB."""

KIB_PER_GIB = 1 << 20
"""kB (KiB) per GiB, for MemTotal."""

NOISY_MARGIN_GIB = Fraction(1, 2)
"""Margins under this are inside the noise of a weights figure (GiB)."""

DEFAULT_NOISE_GIB = Fraction(1, 4)
"""``|headroom|`` at or under this is a knife edge (GiB; issue 18)."""

DEFAULT_MARGIN_GIB = Fraction(3, 2)
"""The margin halogen prints beside its need ("plus 1.5 of margin"), GiB."""

DTYPE_BYTES: dict[str, Fraction] = {
    "f32": Fraction(4),
    "fp32": Fraction(4),
    "f16": Fraction(2),
    "fp16": Fraction(2),
    "bf16": Fraction(2),
    "fp8": Fraction(1),
    "f8": Fraction(1),
    "int8": Fraction(1),
    # ggml block formats: q8_0 stores 32 values in 34 bytes, q4_0 32 in 18
    # (ggml/src/ggml-common.h, block_q8_0 / block_q4_0).
    "q8_0": Fraction(34, 32),
    "q4_0": Fraction(18, 32),
}
"""Bytes per stored K or V element by cache dtype."""


def to_fraction(value: str | int | float | Fraction, *, field: str) -> Fraction:
    """Exact value of a number given as text (no binary rounding of ``"0.1"``).

    Args:
        value: A decimal string, int, float or Fraction.
        field: Name used in the error message.

    Returns:
        The exact rational value.

    Raises:
        ConfigError: not a finite number.
    """
    try:
        out = Fraction(value) if not isinstance(value, float) else Fraction(str(value))
    except (ValueError, ZeroDivisionError, TypeError) as exc:
        raise ConfigError(f"not a number: {value!r}", field=field) from exc
    return out


def kv_bytes_per_position(*, layers: int, kv_heads: int, head_dim: int, dtype: str) -> Fraction:
    """KV cache bytes per token position: K and V for every layer and KV head.

    ``2 * layers * kv_heads * head_dim * bytes(dtype)`` (e.g. vLLM's
    ``get_kv_cache_spec`` page size divided by block size).

    Args:
        layers: Attention layers that keep a KV cache.
        kv_heads: KV heads per layer (after GQA grouping).
        head_dim: Elements per head.
        dtype: Cache dtype, one of ``DTYPE_BYTES``.

    Returns:
        Bytes per position (exact; fractional for ggml block formats).

    Raises:
        ConfigError: unknown dtype or a non-positive dimension.
    """
    if dtype.lower() not in DTYPE_BYTES:
        raise ConfigError(
            f"unknown KV dtype {dtype!r}; one of {sorted(DTYPE_BYTES)}", field="dtype"
        )
    for name, v in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim)):
        if v <= 0:
            raise ConfigError(f"must be positive, got {v}", field=name)
    return 2 * layers * kv_heads * head_dim * DTYPE_BYTES[dtype.lower()]


@dataclass(frozen=True, slots=True)
class PrintedNeed:
    """A requirement the server printed for one pool size.

    Attributes:
        need_gib: What the server said it needs (GiB), KV + arena + vision.
        positions: The pool size it said it for (positions).
        margin_gib: The margin printed beside it ("plus 1.5 of margin"), or None.
    """

    need_gib: Fraction
    positions: int
    margin_gib: Fraction | None = None


_SENTENCE = re.compile(
    r"(?P<pos>\d+)\s+positions\s+need\s+~?\s*(?P<gib>\d+(?:\.\d+)?)\s*GiB"
    r"(?:\s*\(\s*plus\s+(?P<margin>\d+(?:\.\d+)?)(?:\s*GiB)?\s+of\s+margin\s*\))?",
    re.IGNORECASE,
)
"""halogen's own words: ``524288 positions need ~35.0 GiB (plus 1.5 of margin)``."""


def parse_printed_need(text: str) -> PrintedNeed:
    """Parse a printed requirement, in kvreplay's or the engine's words.

    Accepted: ``GIB@POSITIONS`` (``"35.0@524288"``, ``"~35.0 GiB@524288"``) or
    the engine's sentence ``"524288 positions need ~35.0 GiB (plus 1.5 of
    margin)"`` (the margin part optional; it is kept as ``margin_gib``).

    Args:
        text: The flag value.

    Returns:
        The printed requirement.

    Raises:
        ConfigError: wrong shape, or a non-positive figure.
    """
    m = _SENTENCE.search(text)
    if m is not None:
        need = to_fraction(m["gib"], field="printed-need")
        positions = int(m["pos"])
        margin = to_fraction(m["margin"], field="printed-need") if m["margin"] else None
        if need <= 0 or positions <= 0:
            raise ConfigError(f"both parts must be positive, got {text!r}", field="printed-need")
        return PrintedNeed(need, positions, margin)
    gib, sep, pos = text.partition("@")
    if not sep:
        raise ConfigError(
            f"expected GIB@POSITIONS or 'N positions need ~G GiB', got {text!r}",
            field="printed-need",
        )
    gib = gib.strip().lstrip("~").strip()
    if gib.lower().endswith("gib"):
        gib = gib[:-3].strip()
    need = to_fraction(gib, field="printed-need")
    try:
        positions = int(pos.strip())
    except ValueError as exc:
        raise ConfigError(
            f"positions must be an integer, got {pos!r}", field="printed-need"
        ) from exc
    if need <= 0 or positions <= 0:
        raise ConfigError(f"both parts must be positive, got {text!r}", field="printed-need")
    return PrintedNeed(need, positions)


@dataclass(frozen=True, slots=True, kw_only=True)
class FitInputs:
    """Everything the sizing rule reads. All sizes in GiB unless named otherwise.

    Attributes:
        host_ram_gib: Host RAM (GiB), exact.
        host_ram_from_memtotal: True when it came from MemTotal kB (exact), False
            when typed as GiB (possibly a rounded display).
        weights_gib: Resident model weights.
        reserve_gib: RAM kept back for the OS and everything else.
        positions: Requested KV pool size (token positions).
        kv_bytes_per_position: KV bytes per position (bytes).
        max_tok: Largest batch/ubatch the arena is sized for (tokens).
        arena_base_gib: Arena size independent of ``max_tok``.
        arena_per_16k_gib: Arena growth per 16384 tokens of ``max_tok``.
        vision_gib: Vision tower, 0 when none.
        margin_gib: Fixed safety margin required above the need.
        ctx: Context length (tokens): the pool is never clamped below it.
        printed_need: The server's own figure, overriding the model.
        printed_at_max_tok: The ``max_tok`` the printed figure was printed at
            (tokens); None = at ``max_tok`` (no arena adjustment).
        noise_gib: ``|headroom|`` at or under this sets ``knife_edge`` (GiB).
        position_step: Clamped pools are rounded down to a multiple of this
            (positions); 1 means no rounding.
    """

    host_ram_gib: Fraction
    host_ram_from_memtotal: bool = False
    weights_gib: Fraction
    reserve_gib: Fraction = Fraction(0)
    positions: int
    kv_bytes_per_position: Fraction
    max_tok: int = 0
    arena_base_gib: Fraction = Fraction(0)
    arena_per_16k_gib: Fraction = Fraction(0)
    vision_gib: Fraction = Fraction(0)
    margin_gib: Fraction = Fraction(0)
    ctx: int = 0
    printed_need: PrintedNeed | None = None
    printed_at_max_tok: int | None = None
    noise_gib: Fraction = DEFAULT_NOISE_GIB
    position_step: int = 1

    def __post_init__(self) -> None:
        if self.positions <= 0:
            raise ConfigError(f"must be positive, got {self.positions}", field="positions")
        if self.kv_bytes_per_position <= 0:
            raise ConfigError("must be positive", field="kv-bytes-per-position")
        if self.position_step <= 0:
            raise ConfigError("must be positive", field="position-step")
        if self.printed_at_max_tok is not None and self.printed_at_max_tok < 0:
            raise ConfigError("must not be negative", field="printed-at-max-tok")
        for name in ("max_tok", "ctx"):
            if getattr(self, name) < 0:
                raise ConfigError("must not be negative", field=name.replace("_", "-"))
        for name in (
            "weights_gib",
            "reserve_gib",
            "arena_base_gib",
            "arena_per_16k_gib",
            "vision_gib",
            "margin_gib",
            "noise_gib",
        ):
            if getattr(self, name) < 0:
                raise ConfigError("must not be negative", field=name.replace("_", "-"))
        if self.host_ram_gib <= 0:
            raise ConfigError("must be positive", field="host-ram-gib")

    @property
    def budget_gib(self) -> Fraction:
        """Host RAM - weights - reserve (GiB)."""
        return self.host_ram_gib - self.weights_gib - self.reserve_gib

    @property
    def arena_gib(self) -> Fraction:
        """``arena_base + arena_per_16k * max_tok / 16384`` (GiB)."""
        return self.arena_base_gib + self.arena_per_16k_gib * self.max_tok / 16384

    def kv_gib(self, positions: int) -> Fraction:
        """KV pool of ``positions`` token positions (GiB)."""
        return positions * self.kv_bytes_per_position / GIB

    @property
    def fixed_gib(self) -> Fraction:
        """The need that does not scale with the pool (GiB).

        arena + vision under the model; with a printed need, what that figure
        implies once its KV part is taken out, plus ``arena_shift_gib``.
        """
        if self.printed_need is not None:
            return (
                self.printed_need.need_gib
                - self.kv_gib(self.printed_need.positions)
                + self.arena_shift_gib
            )
        return self.arena_gib + self.vision_gib

    @property
    def arena_shift_gib(self) -> Fraction:
        """Arena change from the printed figure's ``max_tok`` to ``max_tok`` (GiB).

        ``arena_per_16k * (max_tok - printed_at_max_tok) / 16384``; 0 without a
        printed need or when ``printed_at_max_tok`` is None.
        """
        if self.printed_need is None or self.printed_at_max_tok is None:
            return Fraction(0)
        return self.arena_per_16k_gib * (self.max_tok - self.printed_at_max_tok) / 16384

    def need_gib(self, positions: int) -> Fraction:
        """Need at a pool of ``positions`` (GiB): KV + fixed part."""
        return self.kv_gib(positions) + self.fixed_gib


@dataclass(frozen=True, slots=True, kw_only=True)
class FitResult:
    """The verdict for one configuration. Sizes in GiB.

    Attributes:
        verdict: ``"fits"``, ``"clamped"``, ``"floor"`` (the clamp stopped at
            the context length) or ``"no_boot"``.
        knife_edge: ``|headroom_gib| <= noise_gib``: the verdict is within the
            noise of the inputs.
        positions: The pool the server ends with (positions; 0 for no_boot).
        requested_positions: The pool asked for.
        budget_gib: host RAM - weights - reserve.
        need_gib: The need at the requested pool.
        margin_gib: The margin required above the need.
        kv_gib: KV part of the need at the requested pool.
        fixed_gib: arena + vision (or the part implied by a printed need).
        headroom_gib: budget - need - margin (negative when it does not fit).
        need_source: ``"model"`` or ``"printed"``.
        max_reserve_gib: The largest reserve at which the requested pool
            still fits (host - weights - need - margin); below 0: none does.
        warnings: Human-readable warnings.
    """

    verdict: str
    positions: int
    requested_positions: int
    knife_edge: bool = False
    noise_gib: Fraction = DEFAULT_NOISE_GIB
    arena_shift_gib: Fraction = Fraction(0)
    budget_gib: Fraction
    need_gib: Fraction
    margin_gib: Fraction
    kv_gib: Fraction
    fixed_gib: Fraction
    headroom_gib: Fraction
    need_source: str
    max_reserve_gib: Fraction
    warnings: tuple[str, ...] = field(default=())


def _largest_fitting(inp: FitInputs) -> int:
    """Largest pool (positions, multiple of the step) with need + margin <= budget.

    May be negative or zero when nothing fits.
    """
    spare_bytes = (inp.budget_gib - inp.margin_gib - inp.fixed_gib) * GIB
    p = math.floor(spare_bytes / inp.kv_bytes_per_position)
    return (p // inp.position_step) * inp.position_step


def fit_pool(inp: FitInputs) -> FitResult:
    """Apply the sizing rule to one configuration.

    Args:
        inp: The configuration.

    Returns:
        The verdict: ``fits`` (pool unchanged), ``clamped`` (lowered to the
        largest fitting size, never raised), ``floor`` (the largest fitting
        size is under ``ctx``: the pool is ``min(requested, ctx)``) or
        ``no_boot`` (the fixed part alone exceeds the budget; ``positions`` is
        0); ``knife_edge`` when ``|headroom| <= noise_gib``.
    """
    warnings: list[str] = []
    if not inp.host_ram_from_memtotal and (inp.host_ram_gib * 10).denominator == 1:
        kind = "a whole number" if inp.host_ram_gib.denominator == 1 else "one decimal"
        warnings.append(
            f"host RAM {float(inp.host_ram_gib):g} GiB is {kind}: a rounded display? "
            "pass --memtotal-kb from /proc/meminfo for the exact figure "
            "(MemTotal 127104060 kB is 121.2159 GiB, shown as 121)"
        )
    if inp.margin_gib < NOISY_MARGIN_GIB:
        warnings.append(
            f"margin {float(inp.margin_gib):g} GiB is under 0.5 GiB,"
            " inside the noise of the weights figure"
        )
    budget = inp.budget_gib
    need = inp.need_gib(inp.positions)
    headroom = budget - need - inp.margin_gib
    source = "printed" if inp.printed_need is not None else "model"
    if inp.printed_need is not None and inp.fixed_gib < 0:
        warnings.append(
            "printed need is below its own KV part:"
            " check --kv-bytes-per-position against the server"
        )
    if headroom >= 0:
        verdict, positions = "fits", inp.positions
    elif inp.fixed_gib > budget:
        verdict, positions = "no_boot", 0
    else:
        verdict = "clamped"
        largest = _largest_fitting(inp)
        positions = min(inp.positions, max(largest, inp.ctx))
        if largest < inp.ctx:
            verdict = "floor"
            over = inp.need_gib(positions) + inp.margin_gib - budget
            warnings.append(
                f"the pool stops at its floor (ctx = {inp.ctx} positions) and still misses "
                f"the budget by {float(over):.3f} GiB: expect the margin to be eaten or an OOM"
            )
    return FitResult(
        verdict=verdict,
        positions=positions,
        requested_positions=inp.positions,
        knife_edge=abs(headroom) <= inp.noise_gib,
        noise_gib=inp.noise_gib,
        arena_shift_gib=inp.arena_shift_gib,
        budget_gib=budget,
        need_gib=need,
        margin_gib=inp.margin_gib,
        kv_gib=inp.kv_gib(inp.positions),
        fixed_gib=inp.fixed_gib,
        headroom_gib=headroom,
        need_source=source,
        max_reserve_gib=inp.host_ram_gib - inp.weights_gib - need - inp.margin_gib,
        warnings=tuple(warnings),
    )


def pool_table(inp: FitInputs, sizes: list[int] | None = None) -> list[dict]:
    """Need and memory handed back by each smaller pool than the requested one.

    Args:
        inp: The configuration.
        sizes: Pool sizes (positions); default: requested, 3/4, 1/2, 1/4 of it
            and ``ctx``, none below ``ctx``, largest first.

    Returns:
        One row per size: ``positions``, ``need_gib``, ``handed_back_gib``
        (need at the requested pool minus need here), ``fits`` (bool).
    """
    if sizes is None:
        cands = {inp.positions, inp.positions * 3 // 4, inp.positions // 2, inp.positions // 4}
        if 0 < inp.ctx <= inp.positions:
            cands.add(inp.ctx)
        sizes = sorted((s for s in cands if s >= max(inp.ctx, 1)), reverse=True)
    base = inp.need_gib(inp.positions)
    rows = []
    for p in sizes:
        need = inp.need_gib(p)
        rows.append(
            {
                "positions": p,
                "need_gib": float(need),
                "handed_back_gib": float(base - need),
                "fits": inp.budget_gib >= need + inp.margin_gib,
            }
        )
    return rows


def reserve_table(inp: FitInputs, reserves: list[Fraction]) -> list[dict]:
    """The verdict at each reserve (GiB), everything else unchanged.

    Returns:
        One row per reserve: ``reserve_gib``, ``budget_gib``, ``verdict``,
        ``positions``, ``knife_edge`` (that reserve's ``|headroom|`` is within
        ``noise_gib``: the reserve sits within the noise of the ceiling at which the
        asked pool stops fitting, issue 42 item 7).
    """
    rows = []
    for r in reserves:
        res = fit_pool(_replace(inp, reserve_gib=r))
        rows.append(
            {
                "reserve_gib": float(r),
                "budget_gib": float(res.budget_gib),
                "verdict": res.verdict,
                "positions": res.positions,
                "knife_edge": res.knife_edge,
            }
        )
    return rows


def arena_table(inp: FitInputs, max_toks: list[int] | None = None) -> list[dict]:
    """Arena size and memory handed back by each smaller ``max_tok``.

    Only meaningful under the model (a printed need fixes the arena); rows
    are still computed from the arena formula.

    Args:
        inp: The configuration.
        max_toks: Values of ``max_tok`` (tokens); default: it, 1/2 and 1/4.

    Returns:
        One row each: ``max_tok``, ``arena_gib``, ``handed_back_gib``.
    """
    if max_toks is None:
        max_toks = sorted(
            {inp.max_tok, inp.max_tok // 2, inp.max_tok // 4} - {0} or {0}, reverse=True
        )
    base = inp.arena_gib
    rows = []
    for m in max_toks:
        a = inp.arena_base_gib + inp.arena_per_16k_gib * m / 16384
        rows.append({"max_tok": m, "arena_gib": float(a), "handed_back_gib": float(base - a)})
    return rows


def _replace(inp: FitInputs, **changes: object) -> FitInputs:
    values = {name: getattr(inp, name) for name in FitInputs.__dataclass_fields__}
    values.update(changes)
    return FitInputs(**values)
