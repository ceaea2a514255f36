"""The options of ``kvreplay export`` / ``kvreplay.export_workload``: ``ExportConfig``, one field a flag.

``kvreplay.argtypes.add_declared`` derives ``kvreplay export``'s flags from these fields;
``kvreplay.api.exporting.export_args`` takes the object.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.options.declare import option

__all__ = ["AIPERF_TYPES", "EXPORT_FORMATS", "ExportConfig"]

EXPORT_FORMATS = ("aiperf", "vllm")
"""The peers ``kvreplay export`` writes for: AIPerf's custom datasets, ``vllm bench serve``'s custom JSONL."""

AIPERF_TYPES = ("auto", "single_turn", "multi_turn", "mooncake_trace", "raw_payload")
"""``--aiperf-type`` choices; ``auto`` is ``multi_turn`` for a workload with sessions, else ``single_turn``."""


@dataclass(slots=True, kw_only=True)
class ExportConfig:
    """Every option of ``kvreplay export``, by its flag's ``dest``.

    Attributes:
        format: One of ``EXPORT_FORMATS`` (required).
        workload: The workload path (required).
        out: The ``.jsonl`` file to write (required).
        aiperf_type: One of ``AIPERF_TYPES``.
        force: Replace an existing ``out``.
        lossy: Write even when the format cannot hold some of the workload.
    """

    format: str = option(flag=None, required=True, choices=EXPORT_FORMATS, group="export",
                         help="the peer whose dataset file to write")
    workload: str = option(flag=None, required=True, group="export",
                           help="the workload (folder of *.json or .jsonl; its sessions side file is read)")
    out: str = option(flag="--out", required=True, metavar="FILE", group="export",
                      help="the .jsonl file to write")
    aiperf_type: str = option("auto", flag="--aiperf-type", choices=AIPERF_TYPES, group="export",
                              help="aiperf: the custom dataset type (auto: multi_turn with sessions, else single_turn; "
                                   "mooncake_trace keeps each chat body's whole message array; raw_payload writes "
                                   "each chat body's exact bytes, a folder of one file per session when the workload "
                                   "has sessions)")
    force: bool = option(False, flag="--force", action="store_true", group="export",
                         help="replace an existing --out file (and its .manifest.json); a device, FIFO or the "
                              "workload itself is never replaced")
    lossy: bool = option(False, flag="--lossy", action="store_true", group="export",
                         help="write even when the format cannot hold some of the workload (messages, roles, fields, "
                              "sessions); the losses are counted on the terminal and in FILE.manifest.json either way")
