"""Prometheus text exposition (0.0.4) parsed into verbatim series.

Parsing is done by the maintained parser,
``prometheus_client.parser.text_string_to_metric_families``; this module only
undoes the parser's renaming so that raw keys are the names the server printed
(SERVERS.md section 6, "Parser quirks"):

- a counter whose name lacks ``_total`` gets ``_total`` appended to its sample
  names (llama.cpp's ``llamacpp:n_tokens_max`` comes back as
  ``llamacpp:n_tokens_max_total``): the printed name is restored;
- family names drop ``_total``, and ``_created`` samples are separate gauge
  families: samples are used, never family names;
- timestamps are ignored (the snapshot carries the time it was taken);
- ``# EOF`` is ignored by the parser, and a name ending in ``_total`` may be a
  histogram (vLLM's ``vllm:iteration_tokens_total``): samples are kept by name.

A scrape is bounded before it is parsed (issue 17: the parser is worse than
quadratic on hostile input, 23 s for 1.1 MB with 100k labels): a line over
``MAX_LINE_BYTES``, a series with over ``MAX_LABELS`` labels or over
``MAX_SERIES`` sample lines make the read fail (``BackendError``) without
parsing. The adapters parse off the event loop: a large scrape in the parser
process, a small one in a worker thread (``_offload.parse_off_loop``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from kvreplay.errors import BackendError
from kvreplay.redaction import maybe_secret_labels, redact_labels

__all__ = [
    "MAX_LABELS",
    "MAX_LINE_BYTES",
    "MAX_SERIES",
    "Sample",
    "check_scrape",
    "declared_names",
    "family_of",
    "parse_exposition",
    "raw_from_samples",
    "series_key",
]

_NAME_AT_LINE_START = re.compile(r"^[ \t]*([a-zA-Z_:][a-zA-Z0-9_:]*)", re.MULTILINE)
_TYPE_LINE = re.compile(r"^#[ \t]+TYPE[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]+(\w+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Sample:
    """One exposition line.

    Attributes:
        name: The sample name as the server printed it (``_total``, ``_bucket``,
            ``_created`` suffixes included).
        labels: Label name -> value, in printed order.
        value: The value (int or float as parsed; NaN and infinities allowed).
        family_type: ``counter``, ``gauge``, ``histogram``, ``summary`` or ``unknown``.
    """

    name: str
    labels: dict[str, str]
    value: float
    family_type: str


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def series_key(name: str, labels: dict[str, str]) -> str:
    """The canonical text of one series: ``name{a="1",b="2"}`` or bare ``name``.

    Labels keep the order given; values are escaped as in the exposition format.
    """
    if not labels:
        return name
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return f"{name}{{{inner}}}"


MAX_LINE_BYTES = 64 << 10
"""Longest exposition line accepted (characters); vLLM's longest is under 1 KiB."""
MAX_LABELS = 128
"""Most labels on one series (counted as ``="`` pairs, an upper bound)."""
MAX_SERIES = 100_000
"""Most sample lines in one scrape; a 2,200-line vLLM scrape is ~160 KB."""


def check_scrape(text: str) -> None:
    """Refuse a scrape over the bounds above, in linear time, before any parsing.

    Raises:
        BackendError: naming the bound crossed (and the 1-based line where it applies).
    """
    lines = text.split("\n")
    series = 0
    for i, ln in enumerate(lines, 1):
        if len(ln) > MAX_LINE_BYTES:
            raise BackendError(f"scrape refused: line {i} is over {MAX_LINE_BYTES} characters")
        if ln[:1] == "#" or not ln.strip():
            continue
        series += 1
        if "{" in ln and ln.count('="') > MAX_LABELS:
            raise BackendError(f"scrape refused: line {i} has over {MAX_LABELS} labels")
    if series > MAX_SERIES:
        raise BackendError(f"scrape refused: {series} series (at most {MAX_SERIES})")


def parse_exposition(text: str) -> list[Sample]:
    """Parse a ``/metrics`` body into samples named as printed.

    Args:
        text: Exposition text (format 0.0.4; an OpenMetrics ``# EOF`` is tolerated).

    Returns:
        Every sample in text order; a secret label's value replaced by the marker
        (``redaction.redact_labels``: a server's own key in an info series).

    Raises:
        BackendError: the text is not valid exposition format, or over a bound
            (``check_scrape``).
    """
    check_scrape(text)
    printed = set(_NAME_AT_LINE_START.findall(text))
    secret = maybe_secret_labels(text)
    out: list[Sample] = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                name = s.name
                if name not in printed and name.endswith("_total") and name[:-6] in printed:
                    name = name[:-6]
                labels = redact_labels(dict(s.labels)) if secret else dict(s.labels)
                out.append(Sample(name, labels, s.value, family.type))
    except (ValueError, TypeError, IndexError) as exc:
        raise BackendError(f"malformed Prometheus exposition: {exc}") from exc
    return out


def family_of(text: str, prefixes: Iterable[tuple[str, str]]) -> str | None:
    """The first family of ``prefixes`` (``(family, series prefix)``) whose prefix starts a sample line, or None.

    Only sample lines count: a HELP text that mentions ``vllm:`` does not. The families
    and their prefixes are the registry's (``_family.series_family``).
    """
    for family, prefix in prefixes:
        if re.search(r"^" + re.escape(prefix), text, re.MULTILINE):
            return family
    return None


def declared_names(text: str) -> frozenset[str]:
    """Sample names that ``# TYPE`` lines declare, whether or not any sample follows.

    prometheus_client prints HELP and TYPE for a labelled counter before its
    first increment (no sample lines yet): such a series is reported, at 0. A
    counter declared without ``_total`` also declares ``<name>_total``.
    """
    out: set[str] = set()
    for name, kind in _TYPE_LINE.findall(text):
        out.add(name)
        if kind == "counter" and not name.endswith("_total"):
            out.add(name + "_total")
    return frozenset(out)


def raw_from_samples(samples: list[Sample]) -> dict[str, float]:
    """Series key -> value for every sample (a repeated series keeps its last value)."""
    return {series_key(s.name, s.labels): s.value for s in samples}
