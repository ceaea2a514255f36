"""The options of ``kvreplay fit`` / ``kvreplay.fit``: ``FitConfig``, one field a flag.

``kvreplay.argtypes.add_declared`` derives ``kvreplay fit``'s flags from these fields, one
group at a time (``FIT_GROUPS``: the command line makes ``fit-ram`` and ``fit-vision``
mutually exclusive pairs and ``fit-kv`` a titled section); ``kvreplay.api.fitting`` takes the
object. GiB and byte figures stay decimal text (read exactly, ``kvreplay.offline.fit``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.argtypes import decimal_text, integer, number_list
from kvreplay.options.declare import option

__all__ = ["ARENA_BASE_GIB", "ARENA_PER_16K_GIB", "FIT_GROUPS", "VISION_GIB", "FitConfig"]

ARENA_BASE_GIB = "3.80"
"""halogen's measured arena base (GiB), the field skill's figure (issue 18)."""

ARENA_PER_16K_GIB = "8.40"
"""halogen's measured arena growth per 16384 tokens of max_tok (GiB, linear; issue 18)."""

VISION_GIB = "1.97"
"""halogen's vision tower when on (GiB; issue 18)."""

FIT_GROUPS: tuple[tuple[str, str], ...] = (
    ("fit-ram", "exclusive"),
    ("fit", ""),
    ("fit-kv", "KV bytes per position (give one way)"),
    ("fit-arena", ""),
    ("fit-vision", "exclusive"),
    ("fit-tail", ""),
)
"""``FitConfig``'s groups in help order: ``exclusive`` (a mutually exclusive pair), a section title, or ``""``."""

_GIB = decimal_text(0, unit="GiB")
_POSITIVE_GIB = decimal_text(0, strict=True, unit="GiB")


def _strings() -> list[str]:
    return []


@dataclass(slots=True, kw_only=True)
class FitConfig:
    """Every option of ``kvreplay fit``, by its flag's ``dest`` (units and meanings in each help).

    ``reserves`` is the parsed list, or the command line's text from a caller that did not parse it.
    """

    host_ram_gib: str | float | None = option(flag="--host-ram-gib", check=_POSITIVE_GIB, metavar="GIB",
                                              unit="GiB", group="fit-ram", help="host RAM (GiB)")
    memtotal_kb: str | int | None = option(flag="--memtotal-kb", check=decimal_text(0, strict=True, unit="kB"),
                                           metavar="KB", unit="kB", group="fit-ram",
                                           help="MemTotal from /proc/meminfo (kB = KiB), exact")
    weights_gib: str | float | None = option(flag="--weights-gib", check=_GIB, metavar="GIB", unit="GiB", group="fit",
                                             help="resident weights (GiB; default: from --from-log)")
    reserve_gib: str | float | None = option(flag="--reserve-gib", check=_GIB, metavar="GIB", unit="GiB", group="fit",
                                             help="RAM kept back (GiB; default 0 or the log's)")
    positions: int | None = option(flag="--positions", check=integer(1), group="fit",
                                   help="requested KV pool (positions; default: from --from-log)")
    from_log: list[str] = option(flag="--from-log", action="append", factory=_strings, metavar="FILE", group="fit",
                                 help="a halogen boot log: the pool it got, clamp, OOM, memory left; twice to compare "
                                      "the held footprints of two boots")
    kv_bytes_per_position: str | float | None = option(flag="--kv-bytes-per-position",
                                                       check=decimal_text(0, strict=True, unit="bytes"),
                                                       metavar="BYTES", unit="bytes", group="fit-kv",
                                                       help="bytes per position, given or measured by a probe (bytes "
                                                            "per token)")
    probe_verdict: str | None = option(flag="--probe-verdict", metavar="VERDICT_JSON", group="fit-kv",
                                       help="take bytes per position from a probe verdict's measured bytes_per_token "
                                            "(refused for a prompt-cache verdict unless --probe-bytes-are-kv)")
    probe_bytes_are_kv: bool = option(False, flag="--probe-bytes-are-kv", action="store_true", group="fit-kv",
                                      help="accept a prompt-cache verdict's bytes per token as KV bytes per position")
    layers: int | None = option(flag="--layers", check=integer(1), group="fit-kv", help="layers with a KV cache")
    kv_heads: int | None = option(flag="--kv-heads", check=integer(1), group="fit-kv", help="KV heads per layer")
    head_dim: int | None = option(flag="--head-dim", check=integer(1), group="fit-kv", help="elements per head")
    kv_dtype: str = option("f16", flag="--kv-dtype", group="fit-kv",
                           help="cache dtype (f32, f16, bf16, fp8, q8_0, q4_0)")
    max_tok: int | None = option(flag="--max-tok", check=integer(0), group="fit-arena",
                                 help="tokens the arena is sized for (default: the boot log's max_tok, else the "
                                      "printed need's --printed-at-max-tok; refused when a printed need has neither; "
                                      "0 under the formula alone)")
    arena_base_gib: str | float = option(ARENA_BASE_GIB, flag="--arena-base-gib", check=_GIB, metavar="GIB",
                                         unit="GiB", group="fit-arena",
                                         help=f"arena base (GiB; default {ARENA_BASE_GIB}, measured on halogen)")
    arena_per_16k_gib: str | float = option(ARENA_PER_16K_GIB, flag="--arena-per-16k-gib", check=_GIB, metavar="GIB",
                                            unit="GiB", group="fit-arena",
                                            help="arena growth per 16384 tokens of --max-tok (GiB; default "
                                                 f"{ARENA_PER_16K_GIB}, measured on halogen); also the slope that "
                                                 "moves a printed need to another --max-tok")
    vision_gib: str | float = option("0", flag="--vision-gib", check=_GIB, metavar="GIB", unit="GiB",
                                     group="fit-vision", help="vision tower (GiB)")
    vision: bool = option(False, flag="--vision", action="store_true", group="fit-vision",
                          help=f"the vision tower is on: --vision-gib {VISION_GIB} (halogen's)")
    margin_gib: str | float = option("1.5", flag="--margin-gib", check=_GIB, metavar="GIB", unit="GiB",
                                     group="fit-tail", help="required margin (GiB; default 1.5, what halogen prints)")
    noise_gib: str | float = option("0.25", flag="--noise-gib", check=_GIB, metavar="GIB", unit="GiB",
                                    group="fit-tail", help="|headroom| at or under this is a knife edge (GiB; default "
                                                           "0.25)")
    ctx: int = option(0, flag="--ctx", check=integer(0), group="fit-tail",
                      help="context length: the pool's floor (tokens)")
    position_step: int = option(1, flag="--position-step", check=integer(1), group="fit-tail",
                                help="round clamped pools down to a multiple of this (positions)")
    printed_need: str | None = option(flag="--printed-need", metavar="GIB@POSITIONS", group="fit-tail",
                                      help="the server's own printed need for a pool size; overrides the model. Also "
                                           "in the engine's words: '524288 positions need ~35.0 GiB (plus 1.5 of "
                                           "margin)'")
    printed_at_max_tok: int | None = option(flag="--printed-at-max-tok", check=integer(0), metavar="N",
                                            group="fit-tail",
                                            help="the --max-tok the printed need was printed at; at another --max-tok "
                                                 "the arena term moves by --arena-per-16k-gib (default: --max-tok, "
                                                 "with a warning)")
    reserves: tuple[str, ...] | list[str | float] | str | None = option(
        flag="--reserves", check=number_list(_GIB), metavar="GIB,GIB,...", group="fit-tail",
        help="reserves for the table (default: 0 to reserve+4 by 1 GiB)")
    json: bool = option(False, flag="--json", action="store_true", group="fit-tail",
                        help="print JSON instead of text")
