"""Public surface: every package re-exports a sorted __all__ whose names exist (httpx style)."""

import importlib
import pkgutil

import pytest

import kvreplay

PACKAGES = sorted(
    m.name for m in pkgutil.walk_packages(kvreplay.__path__, "kvreplay.") if m.ispkg
) + ["kvreplay"]


def _isort_key(name: str) -> tuple[int, str]:
    """isort-style order (ruff RUF022): CONSTANTS, then Classes, then functions, each alphabetical."""
    if name.isupper() or (name.upper() == name and "_" in name):
        return (0, name)
    return (1 if name[:1].isupper() else 2, name)


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_resolves(name):
    mod = importlib.import_module(name)
    exported = getattr(mod, "__all__", None)
    if exported is None:
        return  # a package of modules only (e.g. kvreplay.commands)
    assert list(exported) in (sorted(exported), sorted(exported, key=_isort_key)), f"{name}.__all__ is not sorted"
    assert len(set(exported)) == len(exported)
    for attr in exported:
        assert getattr(mod, attr, None) is not None, f"{name}.{attr} missing"


def test_version_and_implementation_in_cli(capsys):
    from kvreplay.accounting import IMPLEMENTATION
    from kvreplay.cli import main

    with pytest.raises(SystemExit):
        main(["--version"])
    out = capsys.readouterr().out
    assert kvreplay.__version__ in out and IMPLEMENTATION in out


def test_every_command_has_help():
    from kvreplay.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, sp in sub.choices.items():
        assert sp.description, f"kvreplay {name} has no description"
    for must in ("run", "demo", "serve-sim", "snapshot", "report", "simulate", "fit", "probe"):
        assert must in sub.choices
