"""Identity pins: parsing, canonical text, flat comparison, drift."""

from __future__ import annotations

import pytest

from kvreplay.errors import ConfigError
from kvreplay.runner.identity import (
    IdentityChange,
    IdentityPin,
    abort_details,
    check_pins,
    flatten_identity,
    identity_changes,
    parse_pin,
    pin_text,
    pins_from_mapping,
)

SIM = {
    "backend": "halogen",
    "models": ["sim-model"],
    "version": {"version": "0.1", "build": "sim-1", "cache": {"model": "radix", "entries": 1024}},
    "max_entries": 1024,
}


def test_flatten_dots_nested_objects_and_keeps_lists():
    assert flatten_identity(SIM) == {
        "backend": "halogen",
        "models": ["sim-model"],
        "version.version": "0.1",
        "version.build": "sim-1",
        "version.cache.model": "radix",
        "version.cache.entries": 1024,
        "max_entries": 1024,
    }
    assert flatten_identity({"a": {}}) == {"a": {}}
    assert flatten_identity(None) == {}


@pytest.mark.parametrize(
    ("value", "text"),
    [("x", "x"), (1024, "1024"), (0.5, "0.5"), (True, "true"), (False, "false"), (None, "null"),
     (["a", "b"], "a,b"), ([1, 2.5], "1,2.5"), ([], "")],
)
def test_pin_text(value, text):
    assert pin_text(value) == text


def test_pin_text_refuses_a_table():
    with pytest.raises(ConfigError, match="not a table"):
        pin_text({"a": 1})


def test_parse_pin():
    assert parse_pin("models=sim-model") == IdentityPin("models", "sim-model", "--expect-identity")
    assert parse_pin(" version.build = b=2 ") == IdentityPin("version.build", "b=2", "--expect-identity")
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_pin("models")
    with pytest.raises(ConfigError, match="identity key"):
        parse_pin("a..b=1")
    with pytest.raises(ConfigError, match="identity key"):
        parse_pin("=1")


def test_pins_from_a_toml_table_flatten_and_canonicalise():
    pins = pins_from_mapping(
        {"models": ["sim-model"], "version.build": "sim-1", "version": {"cache": {"entries": 1024}}},
        source="plan.toml [identity]",
    )
    assert pins == (
        IdentityPin("models", "sim-model", "plan.toml [identity]"),
        IdentityPin("version.build", "sim-1", "plan.toml [identity]"),
        IdentityPin("version.cache.entries", "1024", "plan.toml [identity]"),
    )
    with pytest.raises(ConfigError, match="empty table"):
        pins_from_mapping({"version": {}})
    with pytest.raises(ConfigError, match="must be a table"):
        pins_from_mapping(["models"])  # type: ignore[arg-type]


def test_check_pins_reports_pinned_and_found_values():
    pins = [parse_pin("models=sim-model"), parse_pin("version.cache.entries=1024"),
            parse_pin("version.cache.model=lru"), parse_pin("version.gpu=h100"), parse_pin("version=x")]
    assert check_pins(SIM, pins) == [
        IdentityChange("version.cache.model", "lru", "radix"),
        IdentityChange("version.gpu", "h100", None),
        IdentityChange("version", "x", None),
    ]
    assert check_pins(SIM, pins[:2]) == []


def test_identity_changes_and_abort_details():
    after = {**SIM, "models": ["sim-model-2"], "version": {**SIM["version"], "build": "sim-1+1"}}
    del after["max_entries"]
    ch = identity_changes(SIM, after)
    assert ch == [
        IdentityChange("max_entries", 1024, None),
        IdentityChange("models", ["sim-model"], ["sim-model-2"]),
        IdentityChange("version.build", "sim-1", "sim-1+1"),
    ]
    assert identity_changes(SIM, dict(SIM)) == []
    assert ch[1].describe() == "models: ['sim-model'] -> ['sim-model-2']"
    assert ch[0].describe() == "max_entries: 1024 -> <absent>"
    assert abort_details(ch[1:]) == {
        "old": {"models": ["sim-model"], "version.build": "sim-1"},
        "new": {"models": ["sim-model-2"], "version.build": "sim-1+1"},
        "changes": [
            {"key": "models", "old": ["sim-model"], "new": ["sim-model-2"]},
            {"key": "version.build", "old": "sim-1", "new": "sim-1+1"},
        ],
    }
