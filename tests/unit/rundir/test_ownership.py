"""kvreplay.rundir owns the run directory: no other module names its data files in a path, and layers hold.

The check parses every module of ``src/kvreplay`` with ``ast`` (so a lazy import inside a
function counts as much as one at the top). A run-directory file name (``records.jsonl``,
``counters.jsonl``, ``summary.json``, ``plan.json``, ``experiment.json``, ``result.json``,
``step.json``) may appear outside ``kvreplay/rundir`` in docstrings, comments and messages,
but not where a path is built or a file opened: as an operand of ``/``, a positional
argument of ``open``/``Path``/``os.path.join``/``joinpath``/``with_name``/..., a
``.../name`` piece of an f-string, or the value of an assignment (a second constant).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kvreplay
from kvreplay.rundir import names

SRC = Path(kvreplay.__file__).resolve().parent
RUNDIR = SRC / "rundir"
OWNED = (names.PLAN, names.RECORDS, names.COUNTERS, names.SUMMARY, names.EXPERIMENT, names.RESULT,
         names.STEP_LOG)
PATH_CALLS = {"open", "Path", "PurePath", "join", "joinpath", "with_name", "copyfile", "copy", "replace",
              "rename", "unlink", "open_new", "atomic_write_bytes", "atomic_write_json", "atomic_write_text",
              "read_bytes", "read_text", "exists", "is_file"}


def _is_owned(value: object) -> bool:
    return isinstance(value, str) and any(value == n or value.endswith("/" + n) for n in OWNED)


def _call_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def path_uses(source: str, filename: str = "<module>") -> list[str]:
    """``"line: text"`` for each place ``source`` builds a path to or opens a run-directory file by name."""
    tree = ast.parse(source, filename)
    hits: list[tuple[int, str]] = []

    def hit(node: ast.AST) -> None:
        hits.append((node.lineno, ast.unparse(node)))

    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and _is_owned(side.value):
                    hit(node)
        elif isinstance(node, ast.Call) and _call_name(node.func) in PATH_CALLS:
            for arg in node.args:
                if isinstance(arg, ast.Constant) and _is_owned(arg.value):
                    hit(node)
        elif isinstance(node, ast.JoinedStr):
            for part in node.values:
                if isinstance(part, ast.Constant) and isinstance(part.value, str) and any(
                        part.value.endswith("/" + n) for n in OWNED):
                    hit(node)
        elif (isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant)
              and _is_owned(node.value.value)):
            hit(node)
    return [f"{line}: {text}" for line, text in sorted(set(hits))]


def _modules(exclude: Path | None = None) -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if exclude is None or exclude not in p.parents)


@pytest.mark.parametrize("snippet", [
    'p = run_dir / "records.jsonl"',
    'data = open(os.path.join(d, "summary.json")).read()',
    'Path(out, "counters.jsonl").unlink()',
    'out.joinpath("plan.json").read_bytes()',
    'x = f"{out}/records.jsonl"',
    'RECORDS_FILE = "records.jsonl"',
    'atomic_write_json(out / "result.json", result)',
    'shutil.copyfile(src, "experiment.json")',
])
def test_the_check_finds_a_planted_path_use(snippet):
    assert len(path_uses(snippet)) == 1, snippet


@pytest.mark.parametrize("snippet", [
    '"""Writes records.jsonl and summary.json."""',
    'raise ConfigError(f"cannot create records.jsonl: {exc}")',
    'note(rep, ("plan.json", d), field="plan.json")',
    'return rec, "plan.json"',
    'p = run_dir / RECORDS',
])
def test_the_check_leaves_messages_and_constants_alone(snippet):
    assert path_uses(snippet) == [], snippet


def test_no_module_outside_rundir_names_a_run_directory_file_in_a_path():
    found = {}
    for p in _modules(exclude=RUNDIR):
        uses = path_uses(p.read_text(encoding="utf-8"), str(p))
        if uses:
            found[str(p.relative_to(SRC))] = uses
    assert found == {}, "go through kvreplay.rundir (its readers/writers or names.*) instead"


def test_rundir_names_are_defined_once():
    defs = {n: [] for n in OWNED}
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in defs:
                defs[node.value.value].append(str(p.relative_to(SRC)))
    assert defs == {n: ["rundir/names.py"] for n in OWNED}


def _imports(path: Path) -> set[str]:
    """Every ``kvreplay`` module ``path`` imports, at the top or inside a function.

    ``from a.b import c`` counts as importing ``a.b`` and ``a.b.c`` (``c`` may be a module).
    """
    out = set()
    pkg = ".".join(("kvreplay", *path.relative_to(SRC).with_suffix("").parts))
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("kvreplay")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: -node.level if path.name != "__init__.py" else len(pkg.split("."))]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            if mod.startswith("kvreplay"):
                out.add(mod)
                out |= {f"{mod}.{a.name}" for a in node.names}  # ``from pkg import module`` too
    return out


ABOVE_RUNDIR = ("kvreplay.runner", "kvreplay.report", "kvreplay.experiments", "kvreplay.commands",
                "kvreplay.backends", "kvreplay.cli", "kvreplay.offline")
PENDING: set[tuple[str, str]] = set()  # allowed upward imports: none (the gauge names come from kvreplay.evidence)


def test_rundir_imports_nothing_above_it():
    up = sorted((p.name, m) for p in _modules() if RUNDIR in p.parents for m in _imports(p)
                if m.startswith(ABOVE_RUNDIR) and (p.name, m) not in PENDING)
    assert up == []


def test_the_runner_imports_neither_report_nor_backends():
    runner = SRC / "runner"
    up = sorted((p.name, m) for p in _modules() if runner in p.parents for m in _imports(p)
                if m.startswith(("kvreplay.report", "kvreplay.backends")))
    assert up == []


@pytest.mark.parametrize("pkg", ["rundir", "runner", "report"])
def test_no_import_cycle_inside(pkg):
    root = SRC / pkg
    mods = {".".join(("kvreplay", *p.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__"): p
            for p in _modules() if root in p.parents}
    graph = {m: {i for i in _imports(p) if i in mods and i != m and not i.endswith(f"kvreplay.{pkg}")}
             for m, p in mods.items()}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        for n in graph[m]:
            if n in stack:
                cycles.append(stack[stack.index(n):] + [n])
            elif n not in done:
                visit(n, [*stack, n])
        done.add(m)

    done: set[str] = set()
    for m in sorted(graph):
        if m not in done:
            visit(m, [m])
    assert cycles == []
