r"""Synthesize a workload in the server's tokens: the behaviour of ``kvreplay synth``.

``kvreplay synth`` (``commands/synth.py``, whose flags derive from
``kvreplay.options.synth.SynthConfig``) prints the lines; this module takes those options,
opens the tokenizer (``kvreplay.workload.tokenizer_client``),
builds and writes the workload (``kvreplay.workload.synth``) and, with ``--check``,
replays it once at C1 and compares each prefix group's designed shared tokens with the
cached tokens the server reported (``check_workload``). Example::

    kvreplay serve-sim --sim-cache radix --sim-time-scale 0 --port 8000 &
    kvreplay synth --tokenizer http://127.0.0.1:8000 --out w.jsonl --requests 20 \\
        --isl 700 --osl 16 --prefix-tokens 300 --prefix-groups 2 --check
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.options.synth import SynthConfig

__all__ = ["SynthConfig", "check_workload", "synth_args"]


def _spec(args: SynthConfig, model: str) -> Any:
    from kvreplay.workload.synth import SynthSpec
    from kvreplay.workload.synth_corpus import Length, parse_length, read_histogram

    if args.isl is not None and args.isl_file is not None:
        raise ConfigError("give --isl or --isl-file, not both")
    isl: Any = read_histogram(args.isl_file) if args.isl_file else parse_length(args.isl or "1024", "--isl")
    osl: Length = parse_length(args.osl, "--osl")
    return SynthSpec(requests=args.requests, isl=isl, osl=osl, model=model, prefix_tokens=args.prefix_tokens,
                     prefix_groups=args.prefix_groups, prefix_share=args.prefix_share, turns=args.turns,
                     think_time_s=args.think_time, api=args.api, seed=args.seed,
                     min_tokens=not args.no_min_tokens)


def synth_args(args: SynthConfig) -> list[str]:
    """Synthesize, write and (``--check``) verify; the lines ``kvreplay synth`` prints.

    Args:
        args: The options (``kvreplay synth``'s flags).

    Raises:
        ConfigError: bad options, an existing ``--out`` without ``--force``, a tokenizer
            that cannot be reached or cannot cut exactly.
    """
    from kvreplay.outpath import check_out
    from kvreplay.redaction import redact_url
    from kvreplay.workload.sessions import sessions_path
    from kvreplay.workload.synth import manifest_path, synthesize, write_synth
    from kvreplay.workload.tokenizer_client import open_tokenizer

    out = Path(args.out)
    # before any request to the tokenizer: the one check of a user-named output (no clobbering,
    # never a device, FIFO or the command's own input; the manifest and sessions beside it too)
    check_out(out, force=args.force, inputs=[x for x in (args.isl_file, args.tokenizer) if x],
              siblings=(manifest_path(out), sessions_path(out)))
    check_dir = Path(args.check_out) if args.check_out else out.with_name(out.name.removesuffix(".jsonl") + ".check")
    if args.check is not None and check_dir.exists():
        raise ConfigError(f"--check-out {check_dir} exists: the check's run directory must be new "
                          "(remove it, or give another --check-out)")
    tok = open_tokenizer(args.tokenizer)
    model = args.model or tok.model
    if not model:
        raise ConfigError("--model is needed: a tokenizer.json names no model")
    result = synthesize(_spec(args, model), tok)
    paths = write_synth(out, result, force=args.force)
    m = result.manifest
    lines = [f"{len(result.bodies)} {m['api']} bodies ({tok.dialect} tokenizer, model {model}) -> {paths[0]}"]
    lines += [f"  wrote {p}" for p in paths[1:]]
    if m["groups"]:
        g = len(m["groups"])
        lines.append(f"  {g} prefix group{'' if g == 1 else 's'} of {m['prefix_tokens']} tokens; "
                     f"every prompt starts with {m['head_tokens']} tokens common to all (BOS, template)")
    if args.check is not None:
        target = args.check or args.tokenizer
        if target != "sim" and not target.startswith(("http://", "https://")):
            raise ConfigError("--check needs a server URL or sim (the --tokenizer is a file)")
        lines.append(f"  check: replaying once at C1 against {redact_url(target)} -> {check_dir}")
        lines += check_workload(out, target, check_dir, m)
    else:
        lines.append(f"  replay: kvreplay run {out} --target URL --phase check:forward:c1")
    return lines


def check_workload(workload: Path, target: str, out: Path, manifest: dict[str, Any]) -> list[str]:
    """Replay ``workload`` once in order at C1 against ``target`` and compare cached with designed tokens.

    Per prefix group (and for the bodies without one): bodies, the designed shared tokens
    (``shared_tokens`` of the manifest, summed) and the cached tokens the server reported
    (the record's ``usage.cached_tokens``, summed); every body whose usage prompt or
    completion tokens differ from its design; and a warning when a group's leader or a
    body without a group reused more than designed (the server's cache was not cold).

    Args:
        workload: The synthetic ``W.jsonl``.
        target: The server's base URL, or ``sim``: the embedded simulator with its radix cache at time scale 0.
        out: The run directory to create.
        manifest: The workload's manifest (``bodies`` rows).

    Returns:
        Lines to print.

    Raises:
        ConfigError, BackendError: the run could not start.
    """
    from kvreplay.api import replay
    from kvreplay.rundir.load import open_run

    # the embedded simulator: its block-level (radix) cache, no simulated delays
    if target == "sim":
        replay(workload, phases=["check:forward:c1"], target=target, out=out, sim={"cache": "radix", "time_scale": 0})
    else:
        replay(workload, phases=["check:forward:c1"], target=target, out=out)
    rows = {r["body"]: r for r in manifest["bodies"]}
    per: dict[Any, list[int]] = {}
    off: list[str] = []
    warm: list[str] = []
    for rec in open_run(out).iter_records():
        row = rows.get(rec.get("body_index", -1))
        if row is None:
            continue
        usage = rec.get("usage") or {}
        cached = usage.get("cached_tokens") or 0
        if cached > row["shared_tokens"] and (row["leader"] or row["group"] is None) and row["turn"] == 0:
            warm.append(f"body {row['body']}")
        acc = per.setdefault(row["group"], [0, 0, 0])
        acc[0] += 1
        acc[1] += row["shared_tokens"]
        acc[2] += cached
        got = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
        if got != (row["prompt_tokens"], row["max_tokens"]):
            off.append(f"    body {row['body']}: usage {got[0]}/{got[1]} (finish_reason "
                       f"{rec.get('finish_reason')}), designed {row['prompt_tokens']}/{row['max_tokens']}")
    lines = ["  group    bodies  designed shared  cached  (tokens, summed over the group's bodies)"]
    for g in sorted(per, key=lambda k: (k is None, k if k is not None else 0)):
        n, designed, cached = per[g]
        lines.append(f"  {'-' if g is None else g!s:<8} {n:>6}  {designed:>15}  {cached:>6}")
    if warm:
        lines.append(f"  the cache was warm: {', '.join(warm[:5])}{' ...' if len(warm) > 5 else ''} reused more than "
                     "designed (a leader or a body without a group); reset the server's prefix cache and check again")
    if off:
        lines.append(f"  {len(off)} bodies whose usage differs from the design (the server stopped early, or "
                     "counts differently):")
        lines += off[:20]
    else:
        lines.append("  every body's usage equals its designed prompt and output tokens")
    return lines
