"""The options of ``kvreplay synth``: ``SynthConfig``, each field declaring its flag.

``kvreplay.argtypes.add_declared`` derives ``kvreplay synth``'s flags from these fields;
``kvreplay.api.synthesis.synth_args`` takes the object. Lengths stay text here
(``--isl 700:50``): ``kvreplay.workload.synth_corpus.parse_length`` reads them, naming the flag.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.argtypes import integer, number
from kvreplay.options.declare import option

__all__ = ["SYNTH_APIS", "SynthConfig"]

SYNTH_APIS = ("completions", "chat")
"""The values of ``--api``: the body shape."""


@dataclass(slots=True, kw_only=True)
class SynthConfig:
    """Every option of ``kvreplay synth`` (group ``synth``), by its flag's ``dest``.

    Attributes:
        out: ``--out``: the ``W.jsonl`` to write (required).
        tokenizer: ``--tokenizer``: a server URL, ``sim`` or a tokenizer.json (required).
        requests: ``--requests``: bodies (sessions with ``turns``).
        isl: ``--isl``: input tokens ``MEAN[:STDDEV]`` (None: 1024).
        isl_file: ``--isl-file``: a histogram of input lengths instead.
        osl: ``--osl``: output tokens ``MEAN[:STDDEV]``.
        prefix_tokens: ``--prefix-tokens``: tokens of a shared prefix.
        prefix_groups: ``--prefix-groups``: distinct shared prefixes.
        prefix_share: ``--prefix-share``: fraction of requests starting with a group prefix (0..1).
        turns: ``--turns``: turns per conversation.
        think_time: ``--think-time``: seconds before each later turn.
        api: ``--api``: one of ``SYNTH_APIS``.
        model: ``--model``: the bodies' model (None: the tokenizer server's).
        seed: ``--seed``: seed of every draw.
        no_min_tokens: ``--no-min-tokens``: leave ``min_tokens`` out.
        force: ``--force``: replace an existing ``out``.
        check: ``--check``: None (no check), ``""`` (the tokenizer server) or a URL.
        check_out: ``--check-out``: the check's run directory.
    """

    out: str = option(flag="--out", required=True, metavar="W.jsonl", group="synth",
                      help="workload file to write (one exact body a line); its manifest W.synth.json (and "
                           "W.sessions.jsonl with --turns) beside it")
    tokenizer: str = option(flag="--tokenizer", required=True, metavar="URL|sim|tokenizer.json", group="synth",
                            help="the server whose tokens size the bodies (vLLM, llama-server or serve-sim: POST "
                                 "/tokenize, /detokenize), sim (the embedded simulator's, for --target sim), or a "
                                 "local tokenizer.json (optional 'tokenizers' library); never a download")
    requests: int = option(100, flag="--requests", check=integer(1), metavar="N", group="synth",
                           help="bodies to write (sessions with --turns; default 100)")
    isl: str | None = option(flag="--isl", metavar="MEAN[:STDDEV]", group="synth",
                             help="input tokens of the whole prompt, shared prefix included (default 1024)")
    isl_file: str | None = option(flag="--isl-file", metavar="FILE", group="synth",
                                  help="input lengths drawn from a histogram: one 'TOKENS WEIGHT' line each (instead "
                                       "of --isl)")
    osl: str = option("128", flag="--osl", metavar="MEAN[:STDDEV]", group="synth",
                      help="output tokens, forced with max_tokens + ignore_eos (+ min_tokens) (default 128)")
    prefix_tokens: int = option(0, flag="--prefix-tokens", check=integer(0), metavar="P", group="synth",
                                help="tokens of a shared prefix at the start of the prompt (counted in --isl; "
                                     "default 0)")
    prefix_groups: int = option(1, flag="--prefix-groups", check=integer(1), metavar="K", group="synth",
                                help="distinct shared prefixes; sharing requests are dealt to them in turn (default 1)")
    prefix_share: float = option(1.0, flag="--prefix-share", check=number(0.0, maximum=1.0), metavar="F",
                                 group="synth", help="fraction of requests that start with a group prefix (default 1)")
    turns: int = option(1, flag="--turns", check=integer(1), metavar="T", group="synth",
                        help="turns per conversation (> 1: sessions side file; each turn resends the history)")
    think_time: float = option(0.0, flag="--think-time", check=number(0.0), metavar="S", unit="s", group="synth",
                               help="seconds before each later turn (default 0)")
    api: str = option("completions", flag="--api", choices=SYNTH_APIS, group="synth",
                      help="body shape: /v1/completions prompt or /v1/chat/completions messages (default "
                           "completions)")
    model: str | None = option(flag="--model", group="synth",
                               help="the bodies' model (default: the tokenizer server's, from its /v1/models)")
    seed: int = option(0, flag="--seed", check=integer(0), group="synth", help="seed of every draw (default 0)")
    no_min_tokens: bool = option(False, flag="--no-min-tokens", action="store_true", group="synth",
                                 help="leave min_tokens out of the bodies (for a server that refuses it; default: "
                                      "written, but for llama-server, which has no such field)")
    force: bool = option(False, flag="--force", action="store_true", group="synth",
                         help="replace an existing --out (and its side files)")
    check: str | None = option(flag="--check", nargs="?", const="", metavar="URL", group="synth",
                               help="then replay the workload once at C1 against URL (default: the --tokenizer "
                                    "server; sim: the embedded simulator's radix cache) and report, per prefix group, "
                                    "designed against cached tokens")
    check_out: str | None = option(flag="--check-out", metavar="DIR", group="synth",
                                   help="run directory of --check (default: W.check beside the workload; must not "
                                        "exist)")
