"""The options of ``kvreplay inspect`` / ``kvreplay.inspect_workload``: ``InspectConfig``, one field a flag.

``kvreplay.argtypes.add_declared`` derives ``kvreplay inspect``'s flags from these fields;
``kvreplay.api.inspection.inspect_args`` takes the object.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.argtypes import integer
from kvreplay.options.declare import option

__all__ = ["InspectConfig"]

_BLOCK_BYTES = 1024
"""``kvreplay.workload.DEFAULT_BLOCK_BYTES`` (the option-parity test holds them equal)."""


@dataclass(slots=True, kw_only=True)
class InspectConfig:
    """Every option of ``kvreplay inspect``, by its flag's ``dest``.

    Attributes:
        workload: The workload path (required).
        json: Print one JSON object instead of text.
        block_bytes: Block size for completions prompts (bytes).
        max_groups: Groups listed in the text output.
    """

    workload: str = option(flag=None, required=True, metavar="WORKLOAD", group="inspect",
                           help="folder of *.json bodies or a .jsonl file")
    json: bool = option(False, flag="--json", action="store_true", group="inspect",
                        help="print one JSON object instead of text")
    block_bytes: int = option(_BLOCK_BYTES, flag="--block-bytes", check=int, metavar="N", unit="bytes",
                              group="inspect",
                              help=f"block size for completions prompts (bytes, default {_BLOCK_BYTES})")
    max_groups: int = option(40, flag="--max-groups", check=integer(0), metavar="N", group="inspect",
                             help="groups listed in the text output (default 40)")
