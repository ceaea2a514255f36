"""No module imports another package's underscored name (issue 26 item 6).

A name or module whose own name starts with one underscore is private to the
package it lives in: ``kvreplay.runner._runner`` and ``kvreplay.errors._where``
belong to ``runner`` and ``errors``. A module of another top-level package
(``kvreplay.workload``, ``kvreplay.report``, ...) must not import it, neither as
``from kvreplay.x.y import _name`` nor as ``from kvreplay.x import _mod`` nor as
``import kvreplay.x._mod``; what is genuinely shared is made public. A private
module of the root package (``kvreplay._something``) is the root-level modules'
(``kvreplay.plan``). import-linter checks the layers (``lint-imports``, the
contracts in pyproject.toml); this test checks what it cannot: imported names.
Read with ``ast`` from the source, so an import inside a function or under
``TYPE_CHECKING`` counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _module_name(path: Path, src: Path) -> tuple[str, bool]:
    """``(dotted module name, is a package __init__)`` of a source file."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _targets(tree: ast.Module, module: str, is_package: bool) -> list[tuple[int, str]]:
    """Every ``kvreplay.…`` dotted name the module imports: ``(line, "kvreplay.x.y.name")``."""
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            out += [(node.lineno, f"{origin}.{a.name}") for a in node.names if a.name != "*"]
    return [(line, name) for line, name in out if name.split(".")[0] == "kvreplay"]


def cross_package_private_imports(src: Path = SRC) -> list[str]:
    """``"importer:line -> kvreplay.x.…._name"`` for each import of another package's private name."""
    found = []
    for path in sorted((src / "kvreplay").rglob("*.py")):
        module, is_package = _module_name(path, src)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        mine = module.split(".")
        for line, target in _targets(tree, module, is_package):
            parts = target.split(".")
            first = next((i for i, p in enumerate(parts) if _private(p)), None)
            if first is None:
                continue
            # A private module of the root package is the root-level modules' own; anything
            # deeper is private to the top-level package kvreplay.<parts[1]>.
            root_private = first == 1
            allowed = (len(mine) == 2 and not is_package) if root_private else (len(mine) > 1 and mine[1] == parts[1])
            if not allowed:
                found.append(f"{module}:{line} -> {target}")
    return found


def test_no_module_imports_another_packages_private_name():
    assert cross_package_private_imports() == []


def test_the_check_finds_each_form(tmp_path):
    pkg = tmp_path / "kvreplay"
    (pkg / "runner").mkdir(parents=True)
    (pkg / "report").mkdir()
    for f in ("__init__.py", "runner/__init__.py", "report/__init__.py", "runner/_runner.py", "_spec.py"):
        (pkg / f).write_text("")
    (pkg / "plan.py").write_text("from kvreplay._spec import X\n")  # root-level module: allowed
    (pkg / "runner" / "_execute.py").write_text(
        "from kvreplay.runner._runner import _Run\nfrom ._runner import _Run\n"  # same package: allowed
    )
    (pkg / "report" / "load.py").write_text(
        "from kvreplay.runner._runner import _Run\n"
        "from kvreplay.runner import _runner\n"
        "import kvreplay.runner._runner\n"
        "from ..runner._runner import Public\n"
        "def f():\n    from kvreplay._spec import Y\n"
        "from kvreplay.runner import Public, __version__\n"  # public and dunder: allowed
    )
    assert cross_package_private_imports(tmp_path) == [
        "kvreplay.report.load:1 -> kvreplay.runner._runner._Run",
        "kvreplay.report.load:2 -> kvreplay.runner._runner",
        "kvreplay.report.load:3 -> kvreplay.runner._runner",
        "kvreplay.report.load:4 -> kvreplay.runner._runner.Public",
        "kvreplay.report.load:6 -> kvreplay._spec.Y",
    ]
