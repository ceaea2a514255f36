"""Read a halogen boot log: the pool it really got, a clamp, an OOM, memory left.

``kvreplay fit --from-log FILE`` reads these lines (issue 18 lists the phrases;
no real halogen log was available, so the full shapes below are what kvreplay's
fixtures use, and each pattern keys on the phrase and the numbers next to it)::

    memory: 67.70 GiB of weights resident                        -> weights_gib
    firmware carve-out: 2.00 GiB for the iGPU (not free memory)  -> carveout_gib
    29.52 GiB for the device (host 121.22 GiB - weights - reserve 24.00 GiB)
                                                                 -> device_gib, reserve_gib
    reserving the KV pool at max_tok 32768: 524288 positions need ~35.0 GiB (plus 1.5 of margin)
                                                                 -> printed need, printed_at_max_tok
    the device cannot spare it                                   -> clamp
    LOWERING THE POOL from 524288 to 262738 positions            -> clamp, pool
    ONE pool of 262738 positions (7.02 GiB) for all slots        -> pool, pool_gib
    0.02 GiB left for everything else                            -> left_gib
    NOTE: ... Lowering HALOGEN_KV_POOL_POSITIONS gives some back -> a hint, not a clamp
    dmalloc: FAILED requesting 0.250 GiB after 39.970 GiB in 566 allocations (out of memory)
                                                                 -> OOM
    listening on 127.0.0.1:8080                                  -> booted

A leading ``[timestamp]``/``halogen:`` prefix is ignored (anything before the
phrase). Matching is case-sensitive, so the NOTE's "Lowering HALOGEN_KV_..." is
never read as "LOWERING THE POOL". A line that matches no pattern is listed in
``unrecognised`` and not interpreted; blank lines are skipped.

The carve-out is firmware memory the OS does not get; it is reported beside the
budget and never counted as free. The *held footprint* of a boot is weights +
pool (GiB, as logged); two boots with the same footprint mean the knob changed
between them did nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from kvreplay.errors import ConfigError

__all__ = ["BootLog", "compare_footprints", "parse_boot_log", "read_boot_log"]

_NUM = r"(\d+(?:\.\d+)?)"

# Order matters: the NOTE pattern comes before anything that could match its words.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("note_lowering_hint", re.compile(r"NOTE\b.*Lowering HALOGEN_KV_POOL_POSITIONS gives some back")),
    (
        "oom",
        re.compile(
            rf"dmalloc: FAILED requesting {_NUM} GiB after {_NUM} GiB in (\d+) allocations"
            r" \(out of memory\)"
        ),
    ),
    ("weights", re.compile(rf"memory: {_NUM} GiB of weights")),
    ("carveout", re.compile(rf"carve-out:? {_NUM} GiB")),
    ("device", re.compile(rf"{_NUM} GiB for the device(?:.*reserve {_NUM} GiB)?")),
    (
        "reserving",
        re.compile(
            rf"reserving the KV(?: pool)?(?: at max_tok (\d+))?:? (\d+) positions need ~?{_NUM} GiB"
            rf"(?: \(plus {_NUM} of margin\))?"
        ),
    ),
    ("cannot_spare", re.compile(r"cannot spare it")),
    ("lowering", re.compile(r"LOWERING THE POOL(?: from (\d+))? to (\d+) positions")),
    ("one_pool", re.compile(rf"ONE pool of (\d+) positions(?: \({_NUM} GiB\))?")),
    ("left", re.compile(rf"{_NUM} GiB left for everything")),
    ("listening", re.compile(r"listening on 127\.")),
)


@dataclass(slots=True)
class BootLog:
    """What one boot log says. Sizes in GiB, pools in positions; None = not logged.

    Attributes:
        path: The file read.
        weights_gib: Resident weights.
        carveout_gib: Firmware (iGPU) carve-out: reported, not free memory.
        device_gib: What the engine says is left for the device (its budget).
        reserve_gib: The reserve it names on that line.
        printed_need_gib: Its printed need for ``requested_positions``.
        printed_margin_gib: The margin printed beside it.
        printed_at_max_tok: The ``max_tok`` of that printed figure (tokens).
        requested_positions: The pool asked for.
        pool_positions: The pool it ended with (``ONE pool of``; or the
            ``LOWERING`` target).
        pool_gib: That pool's size as logged.
        left_gib: Host memory left for everything else.
        clamped: A ``LOWERING THE POOL`` or ``cannot spare it`` line was seen.
        oom: ``(requested_gib, allocated_gib, allocations)`` of a ``dmalloc:
            FAILED`` line, else None.
        booted: ``listening on 127.`` was seen.
        hints: NOTE lines (advice, not events).
        unrecognised: ``(line number, text)`` of lines no pattern matched.
    """

    path: str
    weights_gib: float | None = None
    carveout_gib: float | None = None
    device_gib: float | None = None
    reserve_gib: float | None = None
    printed_need_gib: float | None = None
    printed_margin_gib: float | None = None
    printed_at_max_tok: int | None = None
    requested_positions: int | None = None
    pool_positions: int | None = None
    pool_gib: float | None = None
    left_gib: float | None = None
    clamped: bool = False
    oom: tuple[float, float, int] | None = None
    booted: bool = False
    hints: list[str] = field(default_factory=list)
    unrecognised: list[tuple[int, str]] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        """``"no_boot"`` (OOM), ``"clamped"``, ``"booted"`` or ``"unknown"``."""
        if self.oom is not None:
            return "no_boot"
        if self.clamped:
            return "clamped"
        return "booted" if self.booted else "unknown"

    @property
    def footprint_gib(self) -> float | None:
        """Held footprint: weights + pool (GiB), None when either is not logged."""
        if self.weights_gib is None or self.pool_gib is None:
            return None
        return round(self.weights_gib + self.pool_gib, 6)

    def to_json(self) -> dict:
        """JSON form (``fit --from-log --json``)."""
        return {
            "path": self.path,
            "outcome": self.outcome,
            "booted": self.booted,
            "clamped": self.clamped,
            "oom": None
            if self.oom is None
            else {"requested_gib": self.oom[0], "allocated_gib": self.oom[1], "allocations": self.oom[2]},
            "weights_gib": self.weights_gib,
            "carveout_gib": self.carveout_gib,
            "device_gib": self.device_gib,
            "reserve_gib": self.reserve_gib,
            "printed_need_gib": self.printed_need_gib,
            "printed_margin_gib": self.printed_margin_gib,
            "printed_at_max_tok": self.printed_at_max_tok,
            "requested_positions": self.requested_positions,
            "pool_positions": self.pool_positions,
            "pool_gib": self.pool_gib,
            "left_gib": self.left_gib,
            "footprint_gib": self.footprint_gib,
            "hints": list(self.hints),
            "unrecognised": [{"line": n, "text": t} for n, t in self.unrecognised],
        }


def parse_boot_log(text: str, path: str = "<log>") -> BootLog:
    """Parse a boot log's text (see module docstring for the lines read).

    Args:
        text: The whole log.
        path: Name used in the result.

    Returns:
        The parsed log; unmatched lines are in ``unrecognised``, never guessed.
    """
    log = BootLog(path)
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        for name, pat in _PATTERNS:
            m = pat.search(line)
            if m is None:
                continue
            g = m.groups()
            if name == "note_lowering_hint":
                log.hints.append(line)
            elif name == "oom":
                log.oom = (float(g[0]), float(g[1]), int(g[2]))
            elif name == "weights":
                log.weights_gib = float(g[0])
            elif name == "carveout":
                log.carveout_gib = float(g[0])
            elif name == "device":
                log.device_gib = float(g[0])
                if g[1] is not None:
                    log.reserve_gib = float(g[1])
            elif name == "reserving":
                if g[0] is not None:
                    log.printed_at_max_tok = int(g[0])
                log.requested_positions = int(g[1])
                log.printed_need_gib = float(g[2])
                if g[3] is not None:
                    log.printed_margin_gib = float(g[3])
                # a clamp on the same line ("... cannot spare it") is seen below
                if "cannot spare it" in line:
                    log.clamped = True
            elif name == "cannot_spare":
                log.clamped = True
            elif name == "lowering":
                log.clamped = True
                if g[0] is not None:
                    log.requested_positions = int(g[0])
                log.pool_positions = int(g[1])
            elif name == "one_pool":
                log.pool_positions = int(g[0])
                if g[1] is not None:
                    log.pool_gib = float(g[1])
            elif name == "left":
                log.left_gib = float(g[0])
            elif name == "listening":
                log.booted = True
            break
        else:
            log.unrecognised.append((lineno, line))
    return log


def read_boot_log(path: str) -> BootLog:
    """Read and parse one boot log file.

    Raises:
        ConfigError: the file cannot be read or is not UTF-8 text.
    """
    try:
        text = Path(path).read_bytes().decode("utf-8", errors="strict")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read boot log: {exc}", path=path) from exc
    return parse_boot_log(text, path)


def compare_footprints(a: BootLog, b: BootLog) -> dict:
    """Compare the held footprints of two boots (see module docstring).

    Returns:
        ``{"a_gib", "b_gib", "difference_gib", "same", "sentence"}``; ``same``
        is None when either footprint is not logged.
    """
    fa, fb = a.footprint_gib, b.footprint_gib
    if fa is None or fb is None:
        missing = a.path if fa is None else b.path
        return {
            "a_gib": fa,
            "b_gib": fb,
            "difference_gib": None,
            "same": None,
            "sentence": f"no footprint in {missing} (needs the weights and ONE pool lines)",
        }
    diff = round(fb - fa, 6)
    same = diff == 0 and a.pool_positions == b.pool_positions
    if same:
        sentence = (
            f"both boots hold {fa:.2f} GiB (pool {a.pool_positions} positions):"
            " the knob did nothing"
        )
    else:
        sentence = (
            f"footprint {fa:.2f} GiB -> {fb:.2f} GiB ({diff:+.2f} GiB; pool "
            f"{a.pool_positions} -> {b.pool_positions} positions)"
        )
    return {"a_gib": fa, "b_gib": fb, "difference_gib": diff, "same": same, "sentence": sentence}
