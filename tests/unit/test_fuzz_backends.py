"""Issue 9 fuzz: the Prometheus dump and halogen ``/cache`` readers raise only ``BackendError``.

``kvreplay.backends.parse_dump(text, backend=...)`` is the offline reader of both
(the live adapters call the same ``parse``). Inputs: random text, lines built
from the series names of the built-in profiles with random labels and values,
captured ``/metrics`` fixtures mutated byte by byte, and ``/cache`` JSON with
missing, extra and wrong-typed fields. Whatever the input, a reader returns
numbers or raises ``BackendError`` (``ConfigError`` is only for a bad backend
name or profile, never for a dump), within a deadline.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreplay.backends import BUILTIN_FAMILIES, HALOGEN_KEYS, parse_dump
from kvreplay.errors import BackendError

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "src" / "kvreplay" / "profiles"
PROM_FIXTURES = sorted((ROOT / "fixtures" / "metrics").glob("*/*.prom"))
FAMILIES = tuple(f.name for f in BUILTIN_FAMILIES if f.series_prefix)
"""The Prometheus families of the registry (vllm, sglang, llamacpp): each has captured dumps."""

FUZZ = settings(max_examples=150, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
"""Modest counts; a 5 s deadline per example is the "no hang" check."""


def _series_names() -> list[str]:
    names: set[str] = set()

    def walk(v: object) -> None:
        if isinstance(v, str) and ":" in v and " " not in v:
            names.add(v)
        elif isinstance(v, dict):
            if isinstance(v.get("name"), str):
                names.add(v["name"])
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for f in PROFILES.glob("*.toml"):
        walk(tomllib.loads(f.read_text()))
    return sorted(names)


NAMES = _series_names()


def check_result(result: tuple) -> None:
    """A successful parse gives plain numbers under common names."""
    name, identity, raw, common, started = result
    assert isinstance(identity, dict) and isinstance(raw, dict)
    for k, v in common.items():
        assert isinstance(k, str)
        assert isinstance(v, (int, float)) and not isinstance(v, bool), (k, v)
    assert started is None or (isinstance(started, float) and math.isfinite(started))


def parse_or_backend_error(text: str, backend: str) -> None:
    try:
        result = parse_dump(text, backend=backend)
    except BackendError:
        return
    check_result(result)


def test_profiles_give_series_names():
    assert len(NAMES) > 20 and "vllm:prefix_cache_hits_total" in NAMES


def test_fixtures_found():
    assert {p.parent.name for p in PROM_FIXTURES} == set(FAMILIES)


# --------------------------------------------------------------------- Prometheus

_label_value = st.text(max_size=8) | st.sampled_from(
    ['"', "\\", "\\n", "\n", "}", "{", ",", "=", "é"]
)
_value = st.sampled_from(
    [
        "0",
        "1",
        "-1",
        "1e3",
        "NaN",
        "+Inf",
        "-Inf",
        "1.5",
        "0x10",
        "",
        "abc",
        "1e999",
        "--1",
        "1_000",
    ]
) | st.floats(allow_nan=True).map(repr)


@st.composite
def _sample_line(draw) -> str:
    name = draw(st.sampled_from(NAMES) | st.from_regex(r"[a-z_:][a-z0-9_:]{0,12}", fullmatch=True))
    if draw(st.booleans()):
        labels = draw(
            st.dictionaries(st.from_regex(r"[a-z_]{1,6}", fullmatch=True), _label_value, max_size=3)
        )
        inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
        if draw(st.integers(0, 6)) == 0:
            inner = inner[: draw(st.integers(0, len(inner)))]  # torn label set
        name += "{" + inner + "}"
    line = f"{name} {draw(_value)}"
    if draw(st.integers(0, 4)) == 0:
        line += " " + draw(st.sampled_from(["1700000000000", "x", "1 2", '# {a="b"} 1']))
    return line


@st.composite
def _comment_line(draw) -> str:
    kind = draw(st.sampled_from(["TYPE", "HELP", "UNIT", "EOF", "junk"]))
    name = draw(st.sampled_from(NAMES))
    if kind == "TYPE":
        t = draw(
            st.sampled_from(
                ["counter", "gauge", "histogram", "summary", "untyped", "info", "bogus", ""]
            )
        )
        return f"# TYPE {name} {t}"
    if kind == "HELP":
        return f"# HELP {name} {draw(st.text(max_size=10))}"
    if kind == "EOF":
        return "# EOF"
    return "#" + draw(st.text(max_size=10))


_line = _sample_line() | _comment_line() | st.text(max_size=20)
_exposition = st.lists(_line, max_size=25).map(lambda ls: "\n".join(ls))


@FUZZ
@given(text=_exposition, backend=st.sampled_from(FAMILIES))
def test_generated_expositions(text, backend):
    parse_or_backend_error(text, backend)


@FUZZ
@given(text=st.text(max_size=400), backend=st.sampled_from((*FAMILIES, "halogen")))
def test_random_text(text, backend):
    parse_or_backend_error(text, backend)


@FUZZ
@given(text=_exposition | st.text(max_size=200))
def test_auto_detection_raises_only_backend_error(text):
    parse_or_backend_error(text, "auto")


@FUZZ
@given(
    which=st.integers(0, len(PROM_FIXTURES) - 1),
    edits=st.lists(
        st.tuples(st.integers(0, 10**7), st.integers(0, 40), st.text(max_size=6)), max_size=6
    ),
)
def test_mutated_captures(which, edits):
    path = PROM_FIXTURES[which]
    text = path.read_text()
    for at, cut, insert in edits:
        i = at % (len(text) + 1)
        text = text[:i] + insert + text[i + cut :]
    parse_or_backend_error(text, path.parent.name)


def test_unmutated_captures_parse():
    # The mutation test can tell a real parse from an error: the captures themselves parse.
    for path in PROM_FIXTURES:
        _, _, raw, common, _ = parse_dump(path.read_text(), backend=path.parent.name)
        assert raw and common


@pytest.mark.parametrize(
    "text",
    [
        'vllm:prefix_cache_hits_total{engine="0" 1',
        "vllm:prefix_cache_hits_total NaN",
        'vllm:prefix_cache_hits_total{a="\\q"} 1',
        "vllm:num_requests_running 1\nvllm:num_requests_running 2",
        "# TYPE vllm:prefix_cache_hits counter\n# TYPE vllm:prefix_cache_hits gauge",
        "\x00\x01\x02",
        "vllm:x " + "9" * 5000,
        "{" * 10_000,
    ],
)
def test_hand_picked_expositions(text):
    parse_or_backend_error(text, "vllm")


# --------------------------------------------------------------------- halogen /cache

_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
_json_value = st.recursive(
    _json_leaf,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=8,
)
_cache_doc = st.dictionaries(
    st.sampled_from([*HALOGEN_KEYS, "started", "epoch", "extra"]),
    _json_value,
    max_size=len(HALOGEN_KEYS),
)


@FUZZ
@given(doc=_cache_doc)
def test_cache_json_with_missing_and_wrong_typed_fields(doc):
    text = json.dumps(doc)
    parse_or_backend_error(text, "halogen")
    _, _, raw, common, started = parse_dump(text, backend="halogen")  # an object always parses
    assert raw == doc
    # A common value is there only when its field is a finite number (not a bool) inside
    # [-2^63, 2^64): a counter outside the 64-bit range is invalid for deltas (issue 30 item 2).
    for key, name in {
        "hits": "hits",
        "evicted": "evictions",
        "prompt_tokens_saved": "hit_tokens",
    }.items():
        v = doc.get(key)
        good = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                and -(2**63) <= v < 2**64)
        assert (name in common) == good
        if good:
            assert common[name] == float(v)


@FUZZ
@given(value=_json_value)
def test_cache_json_that_is_not_an_object(value):
    if isinstance(value, dict):
        return
    with pytest.raises(BackendError):
        parse_dump(json.dumps(value), backend="halogen")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        '{"hits": NaN, "misses": Infinity}',
        '{"hits": 1e999}',
        '{"max_entries": [1, 2]}',
        "[" * 100_000,
        '{"a":' * 100_000,
        "\ud800",
        '{"hits": 1, "hits": "x"}',
    ],
)
def test_hand_picked_cache_bodies(text):
    parse_or_backend_error(text, "halogen")
