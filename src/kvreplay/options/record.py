"""The options of ``kvreplay record`` / ``kvreplay.record``: ``RecordConfig``, one field a flag.

``kvreplay.argtypes.add_declared`` derives ``kvreplay record``'s flags from these fields;
``kvreplay.api.recording.record_args_async`` takes the object.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.argtypes import number
from kvreplay.options.declare import option

__all__ = ["RETAINED_PATHS", "RecordConfig"]

RETAINED_PATHS = ("/v1/chat/completions", "/v1/completions")
"""URL paths whose POST bodies ``record`` retains and ``import har|openai-batch`` keeps by default
(OpenAI-compatible generation; ``--paths``; ``kvreplay.workload.capture.DEFAULT_PATHS``)."""


@dataclass(slots=True, kw_only=True)
class RecordConfig:
    """Every option of ``kvreplay record``, by its flag's ``dest``.

    Attributes:
        upstream: The server to forward to (required).
        listen: ``HOST:PORT`` to listen on (port 0: a free one).
        out: The capture folder to create (required).
        max_bodies: Stop retaining after this many bodies.
        max_bytes: Stop retaining past this total size (text: ``500MB``, ``2GiB``).
        paths: Comma-separated URL paths whose POST bodies are retained.
        redact_body_secrets: Retain a body holding a secret with the secret replaced.
        duration: Stop after this long (s; None: until a signal).
        force: Replace the side files beside ``out``.
    """

    upstream: str = option(flag="--upstream", required=True, metavar="URL", group="record",
                           help="the server to forward to (http://host:port[/prefix])")
    listen: str = option("127.0.0.1:0", flag="--listen", metavar="HOST:PORT", group="record",
                         help="address to listen on (default 127.0.0.1:0, a free port, printed)")
    out: str = option(flag="--out", required=True, metavar="W", group="record",
                      help="capture folder to create (bodies + capture.jsonl); W.arrivals.json and W.plan.toml are "
                           "written beside it")
    max_bodies: int | None = option(flag="--max-bodies", check=int, metavar="N", group="record",
                                    help="stop retaining after N bodies (still proxying)")
    max_bytes: str | None = option(flag="--max-bytes", metavar="SIZE", group="record",
                                   help="stop retaining when bodies would pass SIZE in total (e.g. 500MB, 2GiB); "
                                        "still proxying")
    paths: str = option(",".join(RETAINED_PATHS), flag="--paths", metavar="P1,P2", group="record",
                        help="comma-separated URL paths whose POST bodies are retained (others are only proxied); "
                             "default /v1/chat/completions,/v1/completions")
    redact_body_secrets: bool = option(False, flag="--redact-body-secrets", action="store_true", group="record",
                                       help="retain a body that holds a secret (a key shape, a secret field, the "
                                            "request's own credential) with the secret replaced by [REDACTED] (both "
                                            "hashes in the manifest) instead of skipping it")
    duration: float | None = option(flag="--duration", check=number(0.0, strict=True, unit="s"), metavar="S",
                                    unit="s", group="record",
                                    help="stop after S seconds (> 0; default: until SIGINT/SIGTERM)")
    force: bool = option(False, flag="--force", action="store_true", group="record",
                         help="replace W.arrivals.json and W.plan.toml when they exist beside --out (the folder "
                              "itself must be new or empty)")
