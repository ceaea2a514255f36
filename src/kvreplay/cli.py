"""Command line: parse and dispatch only (``main(argv) -> int``, tests call it in-process).

Subcommands live in ``kvreplay.commands``: each module there defines
``NAME`` (the subcommand), ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``. They are discovered, so adding one needs no edit here.

Exit status: 0 ok, 2 bad input or configuration (nothing sent), 3 run aborted
(all outputs written), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from kvreplay import __version__
from kvreplay.errors import ConfigError, WorkloadError

__all__ = ["entry", "main"]

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_ABORTED = 3


def _commands() -> list:
    import kvreplay.commands as pkg

    mods = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"kvreplay.commands.{info.name}")
        if hasattr(mod, "NAME") and hasattr(mod, "run"):
            mods.append(mod)
    return mods


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every discovered subcommand."""
    from kvreplay.accounting import IMPLEMENTATION

    p = argparse.ArgumentParser(
        prog="kvreplay",
        description="Replay exact request bodies against an LLM server and attribute its prefix cache.",
    )
    p.add_argument(
        "--version", action="version", version=f"kvreplay {__version__} (accountant: {IMPLEMENTATION})"
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for mod in _commands():
        sp = sub.add_parser(mod.NAME, help=getattr(mod, "HELP", None), description=getattr(mod, "HELP", None))
        mod.add_arguments(sp)
        sp.set_defaults(_run=mod.run)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one kvreplay command.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when None.

    Returns:
        The process exit status (see module docstring).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args._run(args) or 0)
    except (ConfigError, WorkloadError) as exc:
        print(f"kvreplay: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())
