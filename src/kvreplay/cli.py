"""Command line: parse and dispatch only (``main(argv) -> int``, tests call it in-process).

Subcommands live in ``kvreplay.commands``: each module there defines
``NAME`` (the subcommand) and ``HELP`` as string constants,
``add_arguments(parser)`` and ``run(args) -> int``. They are discovered, so
adding one needs no edit here, and only the command being run is imported.

Exit status: 0 ok, 1 some requests failed inside the client (``client_error``
records; all outputs written), 2 bad input or configuration (nothing sent), 3 run
aborted (all outputs written), 130 interrupted.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
from pathlib import Path

from kvreplay import __version__
from kvreplay.errors import BackendError, ConfigError, WorkloadError

__all__ = ["entry", "main"]

TYPE_CHECKING = False  # `typing` is not imported at start-up (tests/integration/test_perf_imports.py)
if TYPE_CHECKING:
    from typing import NoReturn

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_ABORTED = 3
EXIT_INTERRUPTED = 130


class _Command(tuple[str, str, str]):
    """A subcommand as read from its module's source: ``(name, help, module)``.

    A plain tuple: no ``dataclasses`` import at start-up.
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        return self[0]

    @property
    def help(self) -> str:
        return self[1]

    @property
    def module(self) -> str:
        return self[2]


def _commands() -> list[_Command]:
    """Subcommands found in ``kvreplay/commands``, read without importing them.

    ``NAME`` and ``HELP`` are string constants read from each module's source, so
    ``kvreplay --help`` and every command start without importing the others
    (plotting or the simulator cost a second or more to import).
    """
    import kvreplay.commands as pkg

    out = []
    folder = Path(pkg.__path__[0])
    names = sorted(p.name[:-3] for p in folder.iterdir() if p.name.endswith(".py"))  # not pkgutil: it imports typing
    for name in names:
        if name.startswith("_"):
            continue
        path = folder / f"{name}.py"
        consts: dict[str, str] = {}
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                key = node.targets[0].id
                if key in ("NAME", "HELP") and isinstance(node.value, ast.Constant):
                    consts[key] = str(node.value.value)
        if "NAME" in consts:
            out.append(_Command((consts["NAME"], consts.get("HELP", ""), f"kvreplay.commands.{name}")))
    return out


class _Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose refusal of a value is one line (issue 41 item 4).

    argparse prints the whole usage (14-36 lines for ``run``) before the error; the line
    that matters is the last. Here only it is printed, as argparse words it (naming the
    option and what it accepts): ``kvreplay run: error: argument --read-timeout: not a
    duration: 'x' (e.g. 90s, 70m, 1h)``. Exit status 2, as argparse.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


class _VersionAction(argparse.Action):
    """``--version``: imports the accountant (numpy and the extension) only when asked, so ``--help`` stays light."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        from kvreplay.accounting import IMPLEMENTATION

        sys.stdout.write(f"kvreplay {__version__} (accountant: {IMPLEMENTATION})\n")  # stdout, as argparse's own
        parser.exit()


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser; only the command named in ``argv`` is imported and given its options.

    Args:
        argv: The arguments to be parsed; with None every command is imported
            (complete parser, used by tests and documentation).
    """
    p = _Parser(
        prog="kvreplay",
        description="Replay exact request bodies against an LLM server and attribute its prefix cache.",
    )
    p.add_argument("--version", action=_VersionAction, nargs=0,
                   help="show the version and the SSE accountant (native or pure) and exit")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    chosen = None
    if argv is not None:
        chosen = next((a for a in argv if not a.startswith("-")), None)
    for cmd in _commands():
        # no abbreviations: `simulate --out DIR` was taken as --output-tokens ("expected a whole
        # number >= 0, got 'DIR'"); a flag is spelt in full or refused as unrecognized
        sp = sub.add_parser(cmd.name, help=cmd.help or None, description=cmd.help or None, allow_abbrev=False)
        if argv is None or cmd.name == chosen:
            mod = importlib.import_module(cmd.module)
            mod.add_arguments(sp)
            sp.set_defaults(_run=mod.run)
    return p


def _return_large_blocks() -> None:
    """Have glibc's malloc give every block of 128 KiB or more back to the kernel when freed (issue 32).

    glibc raises its mmap threshold each time such a block is freed (up to 32 MiB),
    after which large arrays come from the heap, whose freed middle is kept: a
    million-request run's workload index and plan, freed before its report, and the
    report's temporaries stayed in the process's RSS and added to its peak. A fixed
    threshold (``mallopt(M_MMAP_THRESHOLD, 128 KiB)``, the default value) keeps them
    mapped on their own. Other C libraries and platforms: nothing is done.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None).mallopt(-3, 128 << 10)  # M_MMAP_THRESHOLD (malloc.h)
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass


def main(argv: list[str] | None = None) -> int:
    """Run one kvreplay command.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` when None.

    Returns:
        The process exit status (see module docstring).
    """
    if argv is None:
        argv = sys.argv[1:]
    _return_large_blocks()
    parser = build_parser(list(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    from kvreplay.redaction import install_streams
    from kvreplay.safe_io import echo

    old_streams = install_streams()  # a registered API key never reaches the terminal (any command)
    try:
        return int(args._run(args) or 0)
    except (ConfigError, WorkloadError) as exc:
        echo(f"kvreplay: error: {exc}", err=True)
        return EXIT_BAD_INPUT
    except BackendError as exc:
        # Before the first request (detection, identity): the target cannot be used.
        echo(f"kvreplay: error: cannot use the target: {exc}", err=True)
        return EXIT_BAD_INPUT
    finally:
        sys.stdout, sys.stderr = old_streams


def entry() -> None:
    """Console-script entry point (a closed stdout pipe, as in ``| head``, ends quietly).

    Ctrl-C that no command handles itself (a run stops its own requests; here, e.g., an A/B's
    final comparison being computed) is one line on stderr and exit 130, not a traceback.
    """
    try:
        code = main()
        sys.stdout.flush()
    except KeyboardInterrupt:
        sys.stderr.write("\nkvreplay: interrupted (SIGINT); what was written before it is kept\n")
        code = EXIT_INTERRUPTED
    except BrokenPipeError:
        # Python's own advice: point stdout at devnull so the exit flush cannot fail again.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)
