"""Export a workload as a peer's dataset: the behaviour of ``kvreplay export`` and ``kvreplay.export_workload``.

``kvreplay export`` (``commands/export.py``) prints what was written and how to run the
peer; this module declares the options (``add_arguments``) and writes the file
(``kvreplay.workload.peers``). The schemas, and what each format cannot carry, are in
``kvreplay.workload.peers``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from kvreplay.api._options import PathLike, fspath, namespace_for
from kvreplay.errors import ConfigError
from kvreplay.outpath import check_out

if TYPE_CHECKING:
    from kvreplay.workload.peers import Exported

__all__ = ["EXPORT_FORMATS", "add_arguments", "export_args", "export_workload"]

EXPORT_FORMATS = ("aiperf", "vllm")
"""The peers ``kvreplay export`` writes for: AIPerf's custom datasets, ``vllm bench serve``'s custom JSONL."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``export``'s options."""
    from kvreplay.workload.peers import AIPERF_TYPES

    p.add_argument("format", choices=EXPORT_FORMATS, help="the peer whose dataset file to write")
    p.add_argument("workload", help="the workload (folder of *.json or .jsonl; its sessions side file is read)")
    p.add_argument("--out", required=True, metavar="FILE", help="the .jsonl file to write")
    p.add_argument("--aiperf-type", choices=AIPERF_TYPES, default="auto",
                   help="aiperf: the custom dataset type (auto: multi_turn with sessions, else single_turn; "
                        "mooncake_trace keeps each chat body's whole message array; raw_payload writes each chat "
                        "body's exact bytes, a folder of one file per session when the workload has sessions)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out file (and its .manifest.json); a device, FIFO or the workload "
                        "itself is never replaced")
    p.add_argument("--lossy", action="store_true",
                   help="write even when the format cannot hold some of the workload (messages, roles, fields, "
                        "sessions); the losses are counted on the terminal and in FILE.manifest.json either way")


def export_args(args: argparse.Namespace) -> Exported:
    """Write ``args.workload`` as ``args.format``'s dataset file at ``args.out``.

    Raises:
        ConfigError: an ``--out`` that would clobber something (``kvreplay.outpath.check_out``).
        WorkloadError: a bad workload, or content the format cannot hold without ``--lossy``.
    """
    from kvreplay.workload.peers import export_aiperf, export_vllm, manifest_path
    from kvreplay.workload.sessions import sessions_path

    check_out(args.out, force=args.force, inputs=[args.workload, sessions_path(args.workload)],
              siblings=[manifest_path(args.out)])
    if args.format == "aiperf":
        return export_aiperf(args.workload, args.out, kind=args.aiperf_type, lossy=args.lossy)
    return export_vllm(args.workload, args.out, lossy=args.lossy)


def export_workload(fmt: str, workload: PathLike, out: PathLike, *, aiperf_type: str = "auto",
                    lossy: bool = False, force: bool = False) -> Exported:
    """Write a workload as a peer benchmark's dataset file (``kvreplay export``).

    Args:
        fmt: ``"aiperf"`` (single_turn, multi_turn or mooncake_trace JSONL) or ``"vllm"``
            (``vllm bench serve --dataset-name custom`` JSONL).
        workload: The workload (folder of ``*.json`` or ``.jsonl``; its sessions side file is read).
        out: The ``.jsonl`` file to write.
        aiperf_type: AIPerf's custom dataset type: ``auto`` (multi_turn with sessions, else
            single_turn), ``single_turn``, ``multi_turn``, ``mooncake_trace``, ``raw_payload``.
        lossy: Write even when the format cannot hold some of the workload (``--lossy``).
        force: Replace an existing ``out`` (``--force``).

    Returns:
        The ``Exported`` record: ``path``, ``kind``, ``lines`` and ``bodies`` written, ``lost``
        and ``messages_lost`` (what the format could not hold, counted), ``notes`` (defaults
        filled in) and ``manifest`` (the same account beside ``out``).

    Raises:
        ConfigError: an unknown format or ``aiperf_type``, a flag that is not a bool, an ``out``
            that would clobber something (each naming its keyword).
        WorkloadError: a bad workload, or content lost without ``lossy`` (nothing written).

    Example::

        res = kvreplay.export_workload("vllm", kvreplay.DEMO_WORKLOAD, "demo.vllm.jsonl")
        print(res.bodies, res.lines, res.path)
    """
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"unknown format {fmt!r}: one of {', '.join(EXPORT_FORMATS)}", field="format")
    from kvreplay.workload.peers import AIPERF_TYPES

    if aiperf_type not in AIPERF_TYPES:
        raise ConfigError(f"unknown AIPerf dataset type {aiperf_type!r}: one of {', '.join(AIPERF_TYPES)}",
                          field="aiperf_type")
    for name, flag in (("lossy", lossy), ("force", force)):
        if not isinstance(flag, bool):
            raise ConfigError(f"must be True or False, not {flag!r}", field=name)
    values = {"format": fmt, "workload": fspath(workload), "out": fspath(out), "aiperf_type": aiperf_type,
              "lossy": lossy, "force": force}
    return export_args(namespace_for(add_arguments, values, None))
