"""Export a workload as a peer's dataset: the behaviour of ``kvreplay export`` and ``kvreplay.export_workload``.

``kvreplay export`` (``commands/export.py``) prints what was written and how to run the
peer; its options are ``kvreplay.options.export.ExportConfig``; this module writes the file
(``kvreplay.workload.peers``). The schemas, and what each format cannot carry, are in
``kvreplay.workload.peers``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kvreplay.errors import ConfigError
from kvreplay.options.export import AIPERF_TYPES, EXPORT_FORMATS, ExportConfig
from kvreplay.outpath import check_out

if TYPE_CHECKING:
    from kvreplay.workload.peers import Exported

__all__ = ["EXPORT_FORMATS", "ExportConfig", "export_args", "export_workload"]

PathLike = str | os.PathLike[str]


def export_args(args: ExportConfig) -> Exported:
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
    if aiperf_type not in AIPERF_TYPES:
        raise ConfigError(f"unknown AIPerf dataset type {aiperf_type!r}: one of {', '.join(AIPERF_TYPES)}",
                          field="aiperf_type")
    for name, flag in (("lossy", lossy), ("force", force)):
        if not isinstance(flag, bool):
            raise ConfigError(f"must be True or False, not {flag!r}", field=name)
    return export_args(ExportConfig(format=fmt, workload=os.fspath(workload), out=os.fspath(out),
                                    aiperf_type=aiperf_type, lossy=lossy, force=force))
