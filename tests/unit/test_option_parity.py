"""Every option of a run has one declaration, and every surface accepts the same set (issue 41 item 1).

The declaration is ``kvreplay.options``: ``RunConfig`` (every option of a run, typed, with its
default), ``RunOptions`` / ``SimOptions`` (the API's keywords and ``sim=`` keys),
``PLAN_TOML_KEYS`` and ``WINDOW_KEYS`` (the plan.toml and experiment ``[window]`` keys and the
option each sets). The surfaces walked: every flag of ``kvreplay run``'s and ``kvreplay demo``'s
parsers, every keyword of ``kvreplay.replay`` / ``replay_async`` / ``demo``, every key the
plan.toml and ``[window]`` readers accept (read from their source, so that a key added there
without a declaration fails here). A surface that drops, renames or adds an option fails one
of these tests; a bad value gets the same refusal, naming the flag, the keyword or the key.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import typing
from dataclasses import MISSING, fields
from pathlib import Path

import pytest

import kvreplay
from kvreplay.api.run import add_arguments
from kvreplay.cli import build_parser
from kvreplay.options import RUN_KEYWORDS, SIM_KEYWORDS, RunConfig, RunOptions, SimOptions
from kvreplay.options.run import PLAN_TOML_KEYS, WINDOW_KEYS, WINDOW_ONLY_KEYS

SRC = Path(kvreplay.__file__).parent
EXPLICIT = {"workload", "phase", "plan", "from_plan", "out", "report", "quiet", "target"}
"""Options that are explicit parameters of ``kvreplay.replay`` (``phase`` is ``phases=``), not ``RunOptions``."""


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    add_arguments(p)
    return p


def _config_fields() -> dict[str, object]:
    out: dict[str, object] = {}
    for f in fields(RunConfig):
        out[f.name] = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
    return out


def test_every_flag_of_run_is_a_declared_option_and_every_declared_option_a_flag():
    dests = {a.dest for a in _run_parser()._actions}
    declared = (set(_config_fields()) - {"sim"}) | {f"sim_{k}" for k in SIM_KEYWORDS}
    assert sorted(dests - declared) == [] and sorted(declared - dests) == []


@pytest.mark.parametrize("command", ["run", "demo"])
def test_the_subcommand_parsers_have_the_same_flags(command):
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    assert {a.dest for a in sub._actions} - {"help"} == {a.dest for a in _run_parser()._actions}


def test_the_declared_defaults_are_the_command_lines():
    parsed = vars(_run_parser().parse_args([]))
    config = _config_fields()
    differ = {k: (v, parsed[k]) for k, v in config.items() if k != "sim" and parsed[k] != v}
    assert differ == {}
    assert RunConfig.from_dests(parsed) == RunConfig(sim={"replicas": 1})  # --sim-replicas defaults to 1
    assert {k for k in parsed if k.startswith("sim_") and parsed[k] is not None} == {"sim_replicas"}


def test_the_api_keywords_are_the_declared_options():
    assert set(_config_fields()) - EXPLICIT - {"sim"} == RUN_KEYWORDS
    for fn in (kvreplay.replay, kvreplay.replay_async):
        params = inspect.signature(fn).parameters
        kinds = {n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
        assert kinds == (EXPLICIT - {"phase"}) | {"phases", "sim"}
        assert typing.get_type_hints(fn, include_extras=True)["options"] == typing.Unpack[RunOptions]
    demo = set(inspect.signature(kvreplay.demo).parameters)
    assert demo == {"workload", "phases", "target", "out", "sim", "report", "quiet", "options"}
    assert typing.get_type_hints(kvreplay.replay)["sim"] is SimOptions


def _set_literal_in(path: Path, function: str, near: str) -> set[str]:
    """The string set literal of ``function`` in ``path`` that contains ``near`` (a reader's accepted keys)."""
    tree = ast.parse(path.read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    for node in ast.walk(fn):
        if isinstance(node, ast.Set):
            keys = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            if near in keys:
                return keys
    raise AssertionError(f"no set literal with {near!r} in {path.name}:{function}")


def test_every_plan_toml_key_is_declared_and_sets_a_declared_option():
    accepted = _set_literal_in(SRC / "plan" / "_spec.py", "load_plan_toml", "on_check_fail")
    assert PLAN_TOML_KEYS == {"phase": "phase", "workload": "workload", "target": "target", "backend": "backend",
                              "identity": "expect_identity", "abort_on_malformed": "abort_on_malformed",
                              "on_check_fail": "on_check_fail", "fleet": "replica"}
    assert accepted == set(PLAN_TOML_KEYS)


def test_every_window_key_is_declared_and_sets_a_declared_option():
    accepted = _set_literal_in(SRC / "experiments" / "window" / "spec.py", "_window", "max_error_rate")
    assert accepted == set(WINDOW_KEYS) | set(WINDOW_ONLY_KEYS)
    assert all(k == v for k, v in WINDOW_KEYS.items())  # a window key has the option's own name


def test_every_declared_flag_has_help_and_the_shared_defaults_are_their_homes():
    from kvreplay.runner.fleet import DEFAULT_REPLICA_HEADER
    from kvreplay.workload import DEFAULT_MAX_BODY_BYTES

    assert [f.name for f in fields(RunConfig) if f.name != "sim" and not f.metadata.get("help")] == []
    assert (RunConfig().max_body_bytes, RunConfig().replica_header) == (DEFAULT_MAX_BODY_BYTES, DEFAULT_REPLICA_HEADER)


# The same bad value on every surface that takes the option: each refuses it, naming it there.
BAD = [
    ("max_error_rate", 2.0, "--max-error-rate", "2", "window", "max_error_rate = 2.0"),
    ("max_error_rate", -0.5, "--max-error-rate", "-0.5", "window", "max_error_rate = -0.5"),
    ("max_transport_failures", -1, "--max-transport-failures", "-1", "window", "max_transport_failures = -1"),
    ("stop_new_after", -5.0, "--stop-new-after", "-5", "window", "stop_new_after = -5.0"),
    ("abort_if", ["host_bytes=1"], "--abort-if", "host_bytes=1", "window", 'abort_if = ["host_bytes=1"]'),
    ("on_check_fail", "retry", "--on-check-fail", "retry", "plan", 'on_check_fail = "retry"'),
    ("abort_on_malformed", "yes", None, None, "plan", 'abort_on_malformed = "yes"'),
]


@pytest.mark.parametrize(("keyword", "value", "flag", "text", "where", "toml"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_value_is_refused_on_every_surface_naming_the_option(keyword, value, flag, text, where, toml,
                                                                    tmp_path, capsys):
    from kvreplay.api import _replay_args

    with pytest.raises(kvreplay.ConfigError) as api:
        _replay_args(kvreplay.DEMO_WORKLOAD, ["a:forward:c1"], None, None, "sim", None, None, "none", True,
                     {keyword: value})
    assert api.value.field == keyword
    if flag is not None:
        with pytest.raises(SystemExit) as cli:
            _run_parser().parse_args([flag, text])
        assert cli.value.code == 2
        assert f"argument {flag}: " in capsys.readouterr().err
    if where == "plan":
        from kvreplay.plan import load_plan_toml

        plan = tmp_path / "plan.toml"
        plan.write_text(f'{toml}\n[[phase]]\nname = "a"\norder = "forward"\nconcurrency = 1\n')
        with pytest.raises(kvreplay.ConfigError) as toml_err:
            load_plan_toml(plan)
        assert (toml_err.value.field, toml_err.value.line) == (keyword, 1)
    else:
        from kvreplay.experiments.window.spec import load_experiment

        bundled = "\n".join(ln for ln in (SRC.parents[1] / "fixtures" / "experiments" / "probe-sizing.toml")
                             .read_text().splitlines() if not ln.startswith(f"{keyword} ="))
        exp = tmp_path / "exp.toml"
        exp.write_text(bundled.replace("[window]\n", f"[window]\n{toml}\n", 1))
        with pytest.raises(kvreplay.ConfigError) as window:
            load_experiment(exp)
        assert window.value.field == f"window.{keyword}"


# Each other command's options: one dataclass (``kvreplay.options.<command>``) whose fields are its
# parser's flags, with their defaults and help; the API builds the same object from keywords.
def _subparser(command: str) -> argparse.ArgumentParser:
    return next(a for a in build_parser()._actions if a.dest == "command").choices[command]


def _config_defaults(config: type) -> dict[str, object]:
    return {f.name: f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
            for f in fields(config) if not f.metadata.get("required")}


def _walk(command: str, config: type, *, sim: bool, given: tuple[str, ...] = ()) -> None:
    parser = _subparser(command)
    dests = {a.dest for a in parser._actions} - {"help"}
    declared = {f.name for f in fields(config) if f.metadata.get("group")}  # not a derived field (no flag)
    if sim:
        declared |= {f"sim_{k}" for k in SIM_KEYWORDS}
    assert sorted(dests - declared) == [] and sorted(declared - dests) == []
    parsed = vars(parser.parse_args(list(given)))
    required = {f.name for f in fields(config) if f.metadata.get("required")}
    assert required == {a.dest for a in parser._actions if a.required}
    required |= {a.dest for a in parser._actions if set(a.option_strings) & set(given)}  # given, not defaulted
    differ = {k: (v, parsed[k]) for k, v in _config_defaults(config).items()
              if k in declared and k not in required and parsed[k] != v}
    assert differ == {}
    assert [f.name for f in fields(config) if f.name in declared and not f.metadata.get("help")] == []


def test_sweep_flags_are_sweep_config_and_the_api_builds_it():
    from kvreplay.api._keywords import config_for
    from kvreplay.options.sweep import SweepConfig

    _walk("sweep", SweepConfig, sim=True)
    parsed = vars(_subparser("sweep").parse_args(["W", "--concurrency", "1,2", "--slo", "ttft_ms<=500",
                                                  "--sim-time-scale", "0"]))
    built = config_for(SweepConfig, {"workload": "W", "concurrency": "1,2", "slo": ["ttft_ms<=500"]},
                       {"time_scale": 0.0})
    assert SweepConfig.from_dests(parsed) == built
    assert built.run_config(out="o") == RunConfig(workload="W", out="o", sim={"replicas": 1, "time_scale": 0.0})
    with pytest.raises(kvreplay.ConfigError) as bad:
        config_for(SweepConfig, {"concurency": "1"}, None)
    assert (bad.value.field, str(bad.value)) == ("concurency", "field 'concurency': unknown option 'concurency'")


def test_synth_flags_are_synth_config():
    from kvreplay.options.declare import from_dests
    from kvreplay.options.synth import SynthConfig

    _walk("synth", SynthConfig, sim=False, given=("--out", "w.jsonl", "--tokenizer", "sim"))
    parsed = vars(_subparser("synth").parse_args(["--out", "w.jsonl", "--tokenizer", "sim", "--check"]))
    assert from_dests(SynthConfig, {**parsed, "command": "synth"}) == SynthConfig(out="w.jsonl", tokenizer="sim",
                                                                                  check="")


def test_probe_flags_are_probe_config_and_its_keywords_the_api_s():
    from kvreplay.api._keywords import config_for
    from kvreplay.experiments.probe.legs import ProbeConfig
    from kvreplay.options.probe import PROBE_KEYWORDS, ProbeCommandConfig, ProbeOptions
    from kvreplay.options.run import SIM_FLEET_KEYWORDS

    parser = _subparser("probe")
    dests = {a.dest for a in parser._actions} - {"help"}
    declared = ({f.name for f in fields(ProbeCommandConfig)} - {"sim"}
                | {f"sim_{k}" for k in SIM_KEYWORDS - SIM_FLEET_KEYWORDS})
    assert sorted(dests - declared) == [] and sorted(declared - dests) == []
    parsed = vars(parser.parse_args([]))
    assert ProbeCommandConfig.from_dests(parsed) == ProbeCommandConfig()
    # the defaults are what the probe measures by default (ProbeConfig, a probe step's too)
    c, d = ProbeCommandConfig(), ProbeConfig()
    assert (c.sizes, c.cold_repeats, c.flush_prefix, c.foreign_tokens, c.flush_max, c.flush_repeats, c.fit_on,
            c.model, c.read_timeout) == (d.sizes, d.cold_repeats, d.flush_prefix_tokens, d.foreign_tokens,
                                         d.flush_max, d.flush_repeats, d.fit_on, d.model, d.read_timeout_s)
    assert {f.name for f in fields(ProbeCommandConfig)} - {"sim", "target", "out", "quiet"} == PROBE_KEYWORDS
    for fn in (kvreplay.probe, kvreplay.probe_async):
        assert typing.get_type_hints(fn, include_extras=True)["options"] == typing.Unpack[ProbeOptions]
    # the keywords take the command line's text or the parsed value, and get its refusal
    built = config_for(ProbeCommandConfig, {"sizes": "1k,2k", "flush_prefix": "4k", "target_prefix": 2048},
                       {"time_scale": 0}, declared=ProbeOptions, fleet=False)
    assert (built.sizes, built.flush_prefix, built.target_prefix, built.sim) == ((1024, 2048), 4096, 2048,
                                                                               {"time_scale": 0})
    with pytest.raises(kvreplay.ConfigError) as bad:
        kvreplay.probe("sim", sizes="x")
    assert (bad.value.field, str(bad.value)) == ("sizes", "field 'sizes': bad size 'x': use e.g. 8k or 8192, got 'x'")
    with pytest.raises(kvreplay.ConfigError) as bad:
        kvreplay.probe("sim", sim={"replicas": 2})
    assert bad.value.field == "sim.replicas"


def test_ab_flags_are_ab_config_and_the_contract_is_run_s():
    from kvreplay.api._keywords import config_for
    from kvreplay.options.ab import AbConfig
    from kvreplay.options.run import SIM_FLEET_KEYWORDS
    from kvreplay.workload import DEFAULT_MAX_BODY_BYTES

    parser = _subparser("ab")
    dests = {a.dest for a in parser._actions} - {"help"}
    declared = ({f.name for f in fields(AbConfig)} - {"sim"}
                | {f"sim_{k}" for k in SIM_KEYWORDS - SIM_FLEET_KEYWORDS})
    assert sorted(dests - declared) == [] and sorted(declared - dests) == []
    assert {a.dest for a in parser._actions if a.required} == {"workload", "arm"}
    parsed = vars(parser.parse_args(["W", "--arm", "off=sim:", "--arm", "on=sim:"]))
    config = AbConfig.from_dests(parsed)
    assert config == AbConfig(workload="W", arm=["off=sim:", "on=sim:"])
    assert config.max_body_bytes == DEFAULT_MAX_BODY_BYTES
    contract = {f.name: f.metadata for f in fields(RunConfig) if f.metadata.get("group") == "contract"}
    assert {f.name: f.metadata for f in fields(AbConfig) if f.metadata.get("group") == "contract"} == contract
    built = config_for(AbConfig, {"workload": "W", "arm": ["off=sim:", "on=sim:"]}, {"time_scale": 0}, fleet=False)
    assert built == AbConfig(workload="W", arm=["off=sim:", "on=sim:"], sim={"time_scale": 0})


def test_simulate_flags_are_simulate_config():
    from kvreplay.api._keywords import config_for
    from kvreplay.options.simulate import SimulateConfig

    _walk("simulate", SimulateConfig, sim=False, given=("W",))
    parsed = vars(_subparser("simulate").parse_args(["W", "--capacities", "1,2", "--replicas", "2"]))
    from kvreplay.options.declare import from_dests

    assert from_dests(SimulateConfig, parsed) == SimulateConfig(source="W", capacities=(1.0, 2.0), replicas=2)
    assert config_for(SimulateConfig, {"source": "W", "capacities": [1, 2]}) == SimulateConfig(source="W",
                                                                                               capacities=[1, 2])


def test_inspect_flags_are_inspect_config():
    from kvreplay.options.inspect import InspectConfig
    from kvreplay.workload import DEFAULT_BLOCK_BYTES

    _walk("inspect", InspectConfig, sim=False, given=("W",))
    assert InspectConfig(workload="W").block_bytes == DEFAULT_BLOCK_BYTES


def test_snapshot_flags_are_snapshot_config():
    from kvreplay.options.snapshot import SnapshotConfig

    _walk("snapshot", SnapshotConfig, sim=False, given=("--target", "http://127.0.0.1:1"))


def test_compare_flags_are_compare_config():
    from kvreplay.options.compare import CompareConfig
    from kvreplay.options.declare import from_dests

    _walk("compare", CompareConfig, sim=False, given=("A", "B"))
    parsed = vars(_subparser("compare").parse_args(["A", "B", "--accept-busy-host"]))
    assert from_dests(CompareConfig, parsed) == CompareConfig(dirs=["A", "B"], accept_busy_host=3.0)


def test_export_flags_are_export_config():
    from kvreplay.options.export import ExportConfig

    _walk("export", ExportConfig, sim=False, given=("vllm", "W", "--out", "o.jsonl"))


def test_record_flags_are_record_config():
    from kvreplay.options.record import RecordConfig

    _walk("record", RecordConfig, sim=False, given=("--upstream", "http://127.0.0.1:1", "--out", "W"))


def test_fit_flags_are_fit_config_and_the_defaults_the_model_s():
    from kvreplay.offline.fit import DEFAULT_MARGIN_GIB, DEFAULT_NOISE_GIB
    from kvreplay.options.fit import FitConfig

    _walk("fit", FitConfig, sim=False)
    c = FitConfig()
    assert (c.margin_gib, c.noise_gib) == (str(float(DEFAULT_MARGIN_GIB)), str(float(DEFAULT_NOISE_GIB)))


def test_serve_sim_flags_are_serve_sim_config_and_the_simulator_s():
    from kvreplay.options.run import SIM_FLEET_KEYWORDS
    from kvreplay.options.serve import ServeSimConfig

    parser = _subparser("serve-sim")
    dests = {a.dest for a in parser._actions} - {"help"}
    own = {f.name for f in fields(ServeSimConfig)} - {"sim"}
    assert dests == own | (SIM_KEYWORDS - SIM_FLEET_KEYWORDS)
    parsed = vars(parser.parse_args(["--sim-cache", "radix", "--time-scale", "0", "--replicas", "2"]))
    assert ServeSimConfig.from_dests(parsed) == ServeSimConfig(replicas=2, sim={"cache": "radix", "time_scale": 0.0})


def test_import_flags_are_import_config_and_the_registry_s_formats():
    from kvreplay.options.declare import from_dests
    from kvreplay.options.importing import ImportConfig
    from kvreplay.workload.formats import format_names, format_of

    _walk("import", ImportConfig, sim=False, given=("mooncake", "t.jsonl", "--out", "o.jsonl"))
    parser = _subparser("import")
    assert next(a for a in parser._actions if a.dest == "format").choices == format_names()
    parsed = vars(parser.parse_args(["sharegpt", "s.json", "--out", "o.jsonl", "--limit", "3", "--think-time", "2"]))
    assert from_dests(ImportConfig, parsed) == ImportConfig(format="sharegpt", trace="s.json", out="o.jsonl",
                                                            limit=3, think_time=2.0)
    # every option a format takes is an ImportConfig field
    own = {f.name for f in fields(ImportConfig)}
    assert sorted({o for n in format_names() for o in format_of(n).options} - own) == []


def test_import_args_takes_the_typed_object_or_an_older_caller_s_parsed_flags(tmp_path):
    from kvreplay.api.importing import import_args
    from kvreplay.options.importing import ImportConfig

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 4, "output_length": 2, "hash_ids": [1]}\n')
    typed = ImportConfig(format="mooncake", trace=str(trace), out=str(tmp_path / "a.jsonl"), block_tokens=4)
    parsed = vars(_subparser("import").parse_args(["mooncake", str(trace), "--out", str(tmp_path / "b.jsonl"),
                                                   "--block-tokens", "4"]))
    a = import_args(typed)
    b = import_args(argparse.Namespace(**parsed))
    assert [ln.replace("a.", "b.") for ln in a] == b
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
