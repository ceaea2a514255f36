"""The options of ``kvreplay compare`` / ``kvreplay.compare``: ``CompareConfig``, one field a flag.

``kvreplay.argtypes.add_declared`` derives ``kvreplay compare``'s flags from these fields;
``kvreplay.api.comparison.compare_args`` takes the object.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.argtypes import integer
from kvreplay.options.ab import ACCEPT_BUSY_FACTOR
from kvreplay.options.declare import option

__all__ = ["CompareConfig"]


def _strings() -> list[str]:
    return []


@dataclass(slots=True, kw_only=True)
class CompareConfig:
    """Every option of ``kvreplay compare``, by its flag's ``dest``.

    Attributes:
        dirs: ab directories, or run directories in pairs (one at least; required).
        primary: Benefits to detect (``ttft_p50:-5%``).
        protected: Regressions to rule out (``itl_p50:+3%``).
        seed: Bootstrap seed.
        n_boot: Bootstrap resamples.
        accept_busy_host: Accept a timing decision on a busy host by this factor (None: ab.json's, if any).
        out: Where compare.json and compare.md go (None: the single ab directory, else ``.``).
        quiet: Print no verdict.
    """

    dirs: list[str] = option(flag=None, required=True, nargs="+", metavar="RUN_DIR", group="compare",
                             help="ab directories, or run directories in pairs")
    primary: list[str] = option(flag="--primary", action="append", factory=_strings, metavar="METRIC:±X%",
                                group="compare",
                                help="a benefit to detect, repeatable: the metric moves by at least X%% in that "
                                     "direction, e.g. ttft_p50:-5%% (5%% lower is a benefit)")
    protected: list[str] = option(flag="--protected", action="append", factory=_strings, metavar="METRIC:±X%",
                                  group="compare",
                                  help="a regression to rule out, repeatable: the metric must not move by more than "
                                       "X%% in that direction, e.g. itl_p50:+3%%")
    seed: int = option(0, flag="--seed", check=int, group="compare", help="bootstrap seed")
    n_boot: int = option(10_000, flag="--n-boot", check=integer(1), group="compare", help="bootstrap resamples")
    accept_busy_host: float | None = option(flag="--accept-busy-host", check=float, nargs="?",
                                            const=ACCEPT_BUSY_FACTOR, metavar="FACTOR", group="compare",
                                            help="accept a timing decision on a busy host when the effect clears "
                                                 f"every gate FACTOR times over (default {ACCEPT_BUSY_FACTOR:g}; else "
                                                 "the factor saved in ab.json); the verdict carries host_busy")
    out: str | None = option(flag="--out", group="compare", help="where to write compare.json / compare.md")
    quiet: bool = option(False, flag="--quiet", action="store_true", group="compare",
                         help="print no verdict (compare.json and compare.md hold it); warnings still go to stderr")
