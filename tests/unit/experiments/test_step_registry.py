"""The step-kind registry: every kind is registered, the core never branches on a kind's name,
and a new kind added through the registry alone is parsed, frozen, run and published."""

from __future__ import annotations

import ast
import asyncio
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kvreplay.errors import ConfigError
from kvreplay.experiments import steps
from kvreplay.experiments.steps import StepKind, kind_names, kind_of, register, unregister
from kvreplay.experiments.steps.base import COMMON_KEYS, check_cells

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src" / "kvreplay"
KIND_MODULES = {SRC / "experiments" / "steps" / f"{k.name}.py" for k in steps.BUILTIN}


def test_builtin_kinds_in_order():
    assert kind_names()[:5] == ("incarnation", "run", "probe", "ab", "restore")
    assert [k.name for k in steps.BUILTIN] == ["incarnation", "run", "probe", "ab", "restore", "quiesce", "sweep"]
    # traits the window's rules read (execute.py's module docstring)
    assert {k.name for k in steps.BUILTIN if k.sends} == {"run", "probe", "ab", "sweep"}
    assert {k.name for k in steps.BUILTIN if k.restores} == {"restore"}
    assert {k.name for k in steps.BUILTIN if k.starts_server} == {"incarnation"}
    assert {k.name for k in steps.BUILTIN if k.cancel_at_deadline} == {"incarnation", "probe", "quiesce"}
    assert {k.name for k in steps.BUILTIN if k.deadline_origin} == {"quiesce"}
    assert {k.name for k in steps.BUILTIN if k.needs_workload} == {"run", "ab", "sweep"}
    assert {k.name for k in steps.BUILTIN if k.phase_views} == {"run"}


def test_every_kind_named_in_toml_files_and_docs_is_registered():
    texts = [p.read_text() for p in sorted((ROOT / "fixtures").rglob("*.toml"))]
    texts += [(ROOT / "README.md").read_text(), (SRC / "experiments" / "window" / "spec.py").read_text()]
    texts += [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    named = {m for t in texts for m in re.findall(r'kind\s*=\s*"([a-z_]+)"', t)}
    assert named, "no kind = \"...\" found: the search is broken"
    assert named <= set(kind_names()), sorted(named - set(kind_names()))
    assert named == {k.name for k in steps.BUILTIN}  # every built-in kind is shown somewhere


MINIMAL = {"incarnation": "", "run": 'phases = ["p:forward:c1"]\n', "probe": "",
           "ab": 'arms = [{name = "a"}, {name = "b"}]\n', "restore": "", "quiesce": 'cmd = "true"\n',
           "sweep": 'concurrency = [1, 2]\n'}


@pytest.mark.parametrize("kind", [k.name for k in steps.BUILTIN])
def test_every_builtin_kind_is_accepted_by_the_parser(tmp_path, kind):
    from kvreplay.experiments.window.spec import load_experiment

    wl = ROOT / "fixtures" / "workloads" / "mtbench-52"
    p = tmp_path / "e.toml"
    p.write_text(f'workload = "{wl}"\n[server]\ntarget = "sim"\n[[step]]\nname = "S"\nkind = "{kind}"\n'
                 + MINIMAL[kind])
    (st,) = load_experiment(p).steps
    assert (st.kind, st.line, st.sends, st.dir) == (kind, 4, kind_of(kind).sends, "steps/00-S")


def _kind_expr(node: ast.AST) -> bool:
    """``x.kind``, ``x["kind"]``, ``kind``/``kind_name``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    return isinstance(node, ast.Name) and node.id in ("kind", "kind_name")


def _strings(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)
    return False


def kind_branches(path: Path, root: Path = ROOT) -> list[str]:
    """``kind == "run"``-style comparisons, and tables keyed by built-in kind names, in one file."""
    names = {k.name for k in steps.BUILTIN}
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_kind_expr(o) for o in operands) and any(_strings(o) for o in operands):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if len(keys & names) >= 2:
                found.append(f"{path.relative_to(root)}:{node.lineno}: a table keyed by kind names")
    return found


def test_no_kind_branch_outside_the_kind_modules():
    files = [p for p in sorted((SRC / "experiments").rglob("*.py")) if p not in KIND_MODULES]
    files.append(SRC / "commands" / "experiment.py")
    assert [b for f in files for b in kind_branches(f)] == []


def test_the_branch_check_finds_a_branch(tmp_path):
    # the check itself finds the shapes of the branches this registry replaced
    bad = tmp_path / "bad.py"
    bad.write_text('if st.kind == "run":\n    pass\nx = s["kind"] in ("run", "ab")\n'
                   'm = {"incarnation": 1, "restore": 2}.get(k)\nok = st.kind == other\n')
    got = [b.split(": ", 1)[1] for b in kind_branches(bad, tmp_path)]
    assert got == ["st.kind == 'run'", "s['kind'] in ('run', 'ab')", "a table keyed by kind names"]


def test_register_refuses_a_taken_or_bad_name():
    with pytest.raises(ValueError, match="already registered"):
        register(kind_of("run"))
    with pytest.raises(ValueError, match="bad step kind name"):
        register(replace(kind_of("run"), name="no way"))
    with pytest.raises(ValueError, match="built in"):
        unregister("run")
    with pytest.raises(KeyError, match="no step kind 'toy'"):
        kind_of("toy")


# -- a toy kind, through the registry alone ----------------------------------------------------

def _toy_parse(rest: dict[str, Any], where: Any, common: dict[str, Any]) -> dict[str, Any]:
    g = rest.get("greeting", "hi")
    if not isinstance(g, str) or not g:
        raise where.error("must be a non-empty string", "greeting")
    return {"greeting": g}


async def _toy_execute(w: Any, st: Any, res: Any) -> None:
    ident, snap, err = await w.server.read()  # the embedded simulator, through its counters adapter
    (w.out / st.dir / "toy.txt").write_text(st.settings["greeting"])
    res.checks.update(greeting=st.settings["greeting"].upper(), models=(ident or {}).get("models"),
                      query_tokens=snap.common.get("query_tokens") if snap is not None else None, error=err)
    res.status = "measured"


def _toy_cells(st: dict[str, Any], fs: dict[str, Any], ctx: Any) -> list[dict[str, Any]]:
    return [{"step": st["name"], "metric": "greeting", "status": st["status"],
             "value": fs["toy"]["greeting"].upper(), "reason": st.get("reason")}]


TOY = StepKind(
    name="toy", keys=frozenset({"greeting"}) | COMMON_KEYS, parse=_toy_parse, execute=_toy_execute,
    freeze=lambda st, wl: ({"toy": {"greeting": st.settings["greeting"]}}, None),
    cells=_toy_cells, schedule=lambda fs: f"  says {fs['toy']['greeting']}")


@pytest.fixture
def toy():
    register(TOY)
    yield TOY
    unregister("toy")
    assert "toy" not in kind_names()


def _file(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "toy.toml"
    p.write_text('[server]\ntarget = "sim"\n\n' + body)
    return p


TOY_FILE = ('[[step]]\nname = "T"\nkind = "toy"\ngreeting = "hello"\nlabel = "first"\n\n'
            '[[step]]\nname = "restore"\nkind = "restore"\n')


def test_an_unregistered_kind_is_refused(tmp_path):
    from kvreplay.experiments.window.spec import load_experiment

    with pytest.raises(ConfigError,
                       match="kind must be one of incarnation, run, probe, ab, restore, quiesce, sweep, not 'toy'"):
        load_experiment(_file(tmp_path, TOY_FILE))


def test_a_toy_kind_is_parsed_frozen_run_and_published(tmp_path, toy):
    from kvreplay.commands.experiment import _schedule
    from kvreplay.experiments.publish import build_result
    from kvreplay.experiments.window.execute import WindowRun
    from kvreplay.experiments.window.frozen import freeze
    from kvreplay.experiments.window.spec import load_experiment

    with pytest.raises(ConfigError, match="unknown key 'colour' for a toy step") as exc:
        load_experiment(_file(tmp_path, TOY_FILE.replace('greeting = "hello"', 'colour = "red"')))
    assert exc.value.field == "step[0].colour" and exc.value.line == 4
    with pytest.raises(ConfigError, match="must be a non-empty string"):
        load_experiment(_file(tmp_path, TOY_FILE.replace('"hello"', '""')))

    exp = load_experiment(_file(tmp_path, TOY_FILE))
    t = exp.steps[0]
    assert (t.kind, t.line, t.sends, t.settings) == ("toy", 4, False, {"label": "first", "greeting": "hello"})
    doc, plans = freeze(exp, None, exp.window)
    assert plans == {}
    assert doc["steps"][0] == {"index": 0, "name": "T", "kind": "toy", "line": 4, "dir": None,
                               "comparable": True, "label": "first", "toy": {"greeting": "hello"}}
    assert "  00 T              toy          says hello" in _schedule(doc).splitlines()

    out = tmp_path / "exp"
    w = WindowRun(exp, doc, plans, None, out, exp.window, {}, lambda m: None)
    results = asyncio.run(w.run())
    assert [(r.name, r.kind, r.status) for r in results] == [("T", "toy", "measured"),
                                                             ("restore", "restore", "measured")]
    assert (out / "steps" / "00-T" / "toy.txt").read_text() == "hello"
    # the simulator answered through its counters adapter (vllm): fresh, so 0 query tokens
    assert results[0].checks["greeting"] == "HELLO" and results[0].checks["query_tokens"] == 0.0
    assert results[0].checks["models"] == ["kvreplay-sim"]
    assert results[0].checks["error"] is None and results[0].label == "first"
    steps_json = [r.to_json() for r in results]
    res = build_result(out, doc, steps_json, started=w.started, ended=w.ended or w.started, aborted=w.aborted,
                       identity=w.snapshot_identity, left_running=w.left_running)
    assert res["status"] == "complete" and res["step_counts"] == {"measured": 2, "failed": 0, "deferred": 0,
                                                                  "aborted": 0}
    assert res["cells"] == [
        {"step": "T", "metric": "greeting", "status": "measured", "value": "HELLO", "reason": None},
        {"step": "restore", "metric": "identity_restored", "status": "measured", "value": True, "reason": None},
    ]
    assert res["findings"] == [] and res["time"]["sim_time_scale"] == {}  # no run step: no restore pattern


def test_check_cells_value_is_measured():
    cells = check_cells("ready")
    assert cells({"name": "X", "status": "failed", "reason": "no"}, {}, None) == [
        {"step": "X", "metric": "ready", "status": "failed", "value": False, "reason": "no"}]


def test_a_check_cell_that_never_ran_has_no_value_not_false():
    from kvreplay.experiments.steps.base import check_cells

    cell = check_cells("identity_restored")
    got = {st: cell({"name": "restore", "status": st, "reason": "r"}, {}, None)[0]["value"]
           for st in ("measured", "failed", "not_run", "deferred", "skipped", "aborted")}
    assert got == {"measured": True, "failed": False, "not_run": None, "deferred": None, "skipped": None,
                   "aborted": None}
