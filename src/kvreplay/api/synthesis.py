r"""Synthesize a workload in the server's tokens: the behaviour of ``kvreplay synth``.

``kvreplay synth`` (``commands/synth.py``) prints the lines; this module declares the
options (``add_arguments``), opens the tokenizer (``kvreplay.workload.tokenizer_client``),
builds and writes the workload (``kvreplay.workload.synth``) and, with ``--check``,
replays it once at C1 and compares each prefix group's designed shared tokens with the
cached tokens the server reported (``check_workload``). Example::

    kvreplay serve-sim --sim-cache radix --sim-time-scale 0 --port 8000 &
    kvreplay synth --tokenizer http://127.0.0.1:8000 --out w.jsonl --requests 20 \\
        --isl 700 --osl 16 --prefix-tokens 300 --prefix-groups 2 --check
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError

__all__ = ["add_arguments", "check_workload", "synth_args"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``synth``'s options."""
    from kvreplay.argtypes import integer, number

    p.add_argument("--out", required=True, metavar="W.jsonl",
                   help="workload file to write (one exact body a line); its manifest W.synth.json (and "
                        "W.sessions.jsonl with --turns) beside it")
    p.add_argument("--tokenizer", required=True, metavar="URL|sim|tokenizer.json",
                   help="the server whose tokens size the bodies (vLLM, llama-server or serve-sim: POST /tokenize, "
                        "/detokenize), sim (the embedded simulator's, for --target sim), or a local tokenizer.json "
                        "(optional 'tokenizers' library); never a download")
    p.add_argument("--requests", type=integer(1), default=100, metavar="N",
                   help="bodies to write (sessions with --turns; default 100)")
    p.add_argument("--isl", default=None, metavar="MEAN[:STDDEV]",
                   help="input tokens of the whole prompt, shared prefix included (default 1024)")
    p.add_argument("--isl-file", default=None, metavar="FILE",
                   help="input lengths drawn from a histogram: one 'TOKENS WEIGHT' line each (instead of --isl)")
    p.add_argument("--osl", default="128", metavar="MEAN[:STDDEV]",
                   help="output tokens, forced with max_tokens + ignore_eos (+ min_tokens) (default 128)")
    p.add_argument("--prefix-tokens", type=integer(0), default=0, metavar="P",
                   help="tokens of a shared prefix at the start of the prompt (counted in --isl; default 0)")
    p.add_argument("--prefix-groups", type=integer(1), default=1, metavar="K",
                   help="distinct shared prefixes; sharing requests are dealt to them in turn (default 1)")
    p.add_argument("--prefix-share", type=number(0.0, maximum=1.0), default=1.0,
                   metavar="F", help="fraction of requests that start with a group prefix (default 1)")
    p.add_argument("--turns", type=integer(1), default=1, metavar="T",
                   help="turns per conversation (> 1: sessions side file; each turn resends the history)")
    p.add_argument("--think-time", type=number(0.0), default=0.0, metavar="S",
                   help="seconds before each later turn (default 0)")
    p.add_argument("--api", choices=("completions", "chat"), default="completions",
                   help="body shape: /v1/completions prompt or /v1/chat/completions messages (default completions)")
    p.add_argument("--model", default=None,
                   help="the bodies' model (default: the tokenizer server's, from its /v1/models)")
    p.add_argument("--seed", type=integer(0), default=0, help="seed of every draw (default 0)")
    p.add_argument("--no-min-tokens", action="store_true",
                   help="leave min_tokens out of the bodies (for a server that refuses it; default: "
                        "written, but for llama-server, which has no such field)")
    p.add_argument("--force", action="store_true", help="replace an existing --out (and its side files)")
    p.add_argument("--check", nargs="?", const="", default=None, metavar="URL",
                   help="then replay the workload once at C1 against URL (default: the --tokenizer server; sim: "
                        "the embedded simulator's radix cache) and report, per prefix group, designed against "
                        "cached tokens")
    p.add_argument("--check-out", default=None, metavar="DIR",
                   help="run directory of --check (default: W.check beside the workload; must not exist)")


def _spec(args: argparse.Namespace, model: str) -> Any:
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


def synth_args(args: argparse.Namespace) -> list[str]:
    """Synthesize, write and (``--check``) verify; the lines ``kvreplay synth`` prints.

    Raises:
        ConfigError: bad options, an existing ``--out`` without ``--force``, a tokenizer
            that cannot be reached or cannot cut exactly.
    """
    from kvreplay.redaction import redact_url
    from kvreplay.workload.synth import synthesize, write_synth
    from kvreplay.workload.tokenizer_client import open_tokenizer

    out = Path(args.out)
    if out.exists() and not args.force:  # before any request to the tokenizer
        raise ConfigError(f"--out {out} exists; give --force to replace it")
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
        lines.append(f"  {len(m['groups'])} prefix groups of {m['prefix_tokens']} tokens; every prompt starts with "
                     f"{m['head_tokens']} tokens common to all (BOS, template)")
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
