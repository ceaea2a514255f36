"""Compare matched A/B blocks: the behaviour of ``kvreplay compare`` and ``kvreplay.compare``.

``kvreplay compare`` (``commands/compare.py``) prints the verdict (or, quiet, the
comparability warnings); its options are ``kvreplay.options.compare.CompareConfig``;
this module reads the blocks and the thresholds (given, else those saved in ``ab.json``), computes the
median paired ratios with bootstrap intervals (``kvreplay.experiments.ab.compare``) and
writes ``compare.json`` and ``compare.md`` (``compare_args``). Examples::

    kvreplay compare runs/ab-trace --primary ttft_p50:-5% --protected itl_p50:+3%
    kvreplay compare runs/off-1 runs/on-1 runs/off-2 runs/on-2 --primary c4.ttft_p50:-5%
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypedDict

from kvreplay.errors import ConfigError
from kvreplay.options.compare import CompareConfig

__all__ = ["CompareConfig", "CompareResult", "compare", "compare_args"]

PathLike = str | os.PathLike[str]


class CompareResult(TypedDict):
    """The comparison as written to ``compare.json`` (``format`` ``kvreplay-compare/1``).

    ``verdict`` is ``benefit``, ``regression``, ``no change``, ``no decision``
    or ``not comparable``; ``checks`` one row per threshold and phase (``metric``, ``role``,
    ``threshold_pct``, ``decision``, ``change_pct`` with its interval ``ci_change_pct`` in
    percent); ``metrics`` every metric's median paired ratio per phase; ``pairs`` the
    (baseline, candidate) blocks; ``reps`` planned and measured repetitions;
    ``caveats`` what qualifies the verdict (``timing_not_computed`` at simulator time scale 0,
    ``host_busy`` of a decision accepted with ``--accept-busy-host``); ``comparability`` what
    differs between the arms' runs (``warnings``, ``blocking`` ones
    void the verdict); ``reasons`` the sentences behind the verdict; ``bootstrap`` the
    seed, resamples, alpha and method.
    """

    reps: dict[str, int]
    format: str
    pairs: list[dict[str, Any]]
    phases: list[str]
    metrics: list[dict[str, Any]]
    checks: list[dict[str, Any]]
    verdict: str
    caveats: list[str]
    reasons: list[str]
    comparability: dict[str, Any]
    bootstrap: dict[str, Any]


def compare_args(args: CompareConfig) -> tuple[CompareResult, str]:
    """Run ``kvreplay compare`` on its options; writes compare.json and compare.md into ``out``.

    ``out`` defaults to the single ab directory given, else the current directory.

    Returns:
        ``(result, markdown)``: the comparison and the text written to compare.md.

    Raises:
        ConfigError: a bad threshold, directories not in pairs, a block that cannot be read.
    """
    import orjson

    from kvreplay.experiments.ab.compare import compare_blocks, load_pairs, parse_threshold, render_compare
    from kvreplay.safe_io import atomic_write_json, write_markdown

    thresholds = [parse_threshold(t, "primary") for t in args.primary]
    thresholds += [parse_threshold(t, "protected") for t in args.protected]
    pairs, arms = load_pairs(list(args.dirs))
    ab = Path(args.dirs[0]) / "ab.json"
    saved_doc = orjson.loads(ab.read_bytes()) if ab.exists() else {}
    if not thresholds and saved_doc:
        saved = saved_doc.get("thresholds", {})
        thresholds = [parse_threshold(t, "primary") for t in saved.get("primary", [])]
        thresholds += [parse_threshold(t, "protected") for t in saved.get("protected", [])]
    accept = args.accept_busy_host
    if accept is None:
        accept = saved_doc.get("accept_busy_host")
    if accept is not None and not accept > 0:
        raise ConfigError(f"must be a factor > 0, not {accept:g}", field="--accept-busy-host")
    result = compare_blocks(pairs, thresholds, seed=args.seed, n_boot=args.n_boot, accept_busy_host=accept)
    out = Path(args.out) if args.out else (Path(args.dirs[0]) if len(args.dirs) == 1 else Path("."))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "compare.json", result)
    text = render_compare(result, arms)
    write_markdown(out / "compare.md", text)
    typed: CompareResult = result  # type: ignore[assignment]
    return typed, text


def compare(dirs: Sequence[PathLike], *, primary: Iterable[str] = (), protected: Iterable[str] = (), seed: int = 0,
            n_boot: int = 10_000, out: PathLike | None = None,
            accept_busy_host: float | None = None) -> CompareResult:
    """Compare matched A/B blocks (``kvreplay compare``): paired ratios, bootstrap intervals, a verdict.

    Args:
        dirs: ``kvreplay ab`` directories, or plain run directories in pairs (baseline, candidate).
        primary: Primary checks, e.g. ``["ttft_p50:-5%"]`` (lower by 5% is a benefit).
        protected: Protected checks, e.g. ``["itl_p50:+3%"]`` (rising by more is a regression).
            With neither, the thresholds saved in the first directory's ab.json are used.
        seed: Bootstrap seed.
        n_boot: Bootstrap resamples.
        out: Where compare.json and compare.md are written (default: the single ab
            directory given, else the current directory).
        accept_busy_host: Accept a timing decision on a busy host when the effect clears every
            gate this many times over (the verdict then carries the ``host_busy`` caveat); None =
            the factor saved in ab.json, if any.

    Returns:
        The comparison as written to compare.json (``CompareResult``).

    Raises:
        ConfigError: a bad threshold, directories not in pairs, a block that cannot be read.

    Example::

        res = kvreplay.compare(["runs/ab-trace"], primary=["ttft_p50:-5%"])
        print(res["verdict"], [(c["metric"], c["decision"]) for c in res["checks"]])
    """
    for name, value in (("primary", primary), ("protected", protected)):
        if isinstance(value, str):
            raise ConfigError(f"{name} is a list of thresholds, e.g. ['ttft_p50:-5%']", field=name)
    config = CompareConfig(dirs=[os.fspath(d) for d in dirs], primary=list(primary), protected=list(protected),
                           seed=seed, n_boot=n_boot, out=None if out is None else os.fspath(out),
                           accept_busy_host=accept_busy_host)
    result, _text = compare_args(config)
    return result
