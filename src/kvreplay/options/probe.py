"""The options of ``kvreplay probe`` / ``kvreplay.probe``: ``ProbeCommandConfig`` and its keywords ``ProbeOptions``.

``ProbeCommandConfig`` is ``TargetConfig`` (target, backend, API key, simulator) with the
probe's own fields (group ``probe``), each declaring its flag
(``kvreplay.argtypes.add_declared`` derives ``kvreplay probe``'s flags from them); the API
builds it from ``ProbeOptions`` keywords, each checked as its flag is. What the probe
measures is ``kvreplay.experiments.probe.legs.ProbeConfig`` (built from this object); the
defaults here are its defaults (the option-parity test holds them equal).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

from kvreplay.argtypes import integer, number, token_sizes, tokens
from kvreplay.options.declare import option
from kvreplay.options.run import TargetConfig

__all__ = ["FIT_SOURCES", "PROBE_KEYWORDS", "ProbeCommandConfig", "ProbeOptions"]

FIT_SOURCES = ("ttft", "stream", "server")
"""The series ``prefill_fit`` may be fitted on (``--fit-on``)."""


class ProbeOptions(TypedDict, total=False):
    """Keyword options of ``kvreplay.probe`` / ``probe_async`` (each ``--flag`` of ``kvreplay probe`` by its name).

    Token counts are ints or the command line's text (``"8k"``, k = 1024 tokens).

    Attributes:
        sizes: ``--sizes``: cold/warm leg sizes, ``"8k,16k"`` or a list of token counts.
        cold_repeats: ``--cold-repeats``: cold legs per size (default 1).
        flush_prefix: ``--flush-prefix``: prefix size of the eviction legs (tokens; default 8k).
        foreign_tokens: ``--foreign-tokens``: size of each foreign prompt (tokens; default 1k).
        flush_max: ``--flush-max``: upper bound of the eviction bisection (0 = no eviction legs; default 32).
        flush_repeats: ``--flush-repeats``: repeats per bisection point (default 2).
        fit_on: ``--fit-on``: the series fitted (default ``"ttft"``).
        model: ``--model``: model id of the bodies (default: the first of /v1/models).
        read_timeout: ``--read-timeout``: longest silence between two reads (s; default 600).
        target_prefix: ``--target-prefix``: say whether the cache covers a prefix of this size (tokens).
        backend: ``--backend``: counter adapter.
        profile: ``--profile``: TOML profile for ``backend="prometheus"``.
        api_key_env: ``--api-key-env``: environment variable holding the API key.
        api_key_file: ``--api-key-file``: file holding the API key.
        ca_file: ``--ca-file``: extra trusted CA certificates (PEM).
    """

    sizes: str | Sequence[int]
    cold_repeats: int
    flush_prefix: int | str
    foreign_tokens: int | str
    flush_max: int
    flush_repeats: int
    fit_on: Literal["ttft", "stream", "server"]
    model: str | None
    read_timeout: float
    target_prefix: int | str | None
    backend: str
    profile: str | None
    api_key_env: str | None
    api_key_file: str | None
    ca_file: str | None


PROBE_KEYWORDS: frozenset[str] = frozenset(ProbeOptions.__annotations__)
"""Every key of ``ProbeOptions``."""


@dataclass(slots=True, kw_only=True)
class ProbeCommandConfig(TargetConfig):
    """Every option of one probe: the target's (inherited) and the probe's own, by flag ``dest``.

    Attributes:
        sizes: Cold/warm leg sizes (tokens).
        cold_repeats: Cold legs per size.
        flush_prefix: Prefix size of the eviction legs (tokens).
        foreign_tokens: Size of each foreign prompt (tokens).
        flush_max: Upper bound of the eviction bisection (0 skips the eviction legs).
        flush_repeats: Repeats per bisection point.
        fit_on: One of ``FIT_SOURCES``.
        model: Model id of the bodies (None: the first of /v1/models).
        out: The output directory (None: ``runs/<UTC timestamp>``).
        read_timeout: Longest silence between two reads (s).
        target_prefix: A prefix size (tokens) the verdict says whether the cache covers.
        quiet: Print no progress.
    """

    sizes: tuple[int, ...] = option((8192, 16384, 32768, 65536), flag="--sizes", check=token_sizes, group="probe",
                                    help="cold/warm leg sizes in tokens (k = 1024)")
    cold_repeats: int = option(1, flag="--cold-repeats", check=integer(1), group="probe",
                               help="cold legs per size (the fastest is fitted)")
    flush_prefix: int = option(8192, flag="--flush-prefix", check=tokens(16), group="probe", unit="tokens",
                               help="prefix size of the eviction legs (tokens)")
    foreign_tokens: int = option(1024, flag="--foreign-tokens", check=tokens(16), group="probe", unit="tokens",
                                 help="size of each foreign prompt (tokens)")
    flush_max: int = option(32, flag="--flush-max", check=integer(0), metavar="K", group="probe",
                            help="upper bound of the eviction bisection (0 = skip eviction legs)")
    flush_repeats: int = option(2, flag="--flush-repeats", check=integer(1), group="probe",
                                help="repeats per bisection point")
    fit_on: str = option("ttft", flag="--fit-on", choices=FIT_SOURCES, group="probe",
                         help="series for prefill_fit: ttft (send to first token), stream (headers to first token), "
                              "server (timings.prompt_ms)")
    model: str | None = option(flag="--model", group="probe",
                               help="model id for the bodies (default: first of /v1/models)")
    out: str | None = option(flag="--out", group="probe", help="output directory (default runs/<UTC timestamp>)")
    read_timeout: float = option(600.0, flag="--read-timeout", check=number(0, strict=True, unit="s"), metavar="S",
                                 unit="s", group="probe",
                                 help="longest silence allowed between two reads (s); a cold 64k prefill can be long")
    target_prefix: int | None = option(flag="--target-prefix", check=tokens(1), metavar="TOKENS", unit="tokens",
                                       group="probe", help="state whether Cmax covers a prefix of this size (e.g. 24k)")
    quiet: bool = option(False, flag="--quiet", action="store_true", group="probe",
                         help="print no progress (the output directory holds everything)")
