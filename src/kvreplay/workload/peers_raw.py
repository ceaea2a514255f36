"""AIPerf's verbatim format ``--custom-dataset-type raw_payload`` (``export aiperf --aiperf-type raw_payload``).

Schema (ai-dynamo/aiperf 0.13.0, ``src/aiperf/dataset/loader/raw_payload.py``,
``RawPayloadDatasetLoader``; ``models.py`` ``RawPayload``):

- a **file**: one complete request body per line, each line one single-turn conversation;
- a **folder**: one ``*.jsonl`` file per conversation, its lines the turns in order; the
  files are read in sorted name order (session ids are AIPerf's own, not the names);
- every line must be a JSON object with a ``messages`` list (the loader refuses any other
  line with its file and line), so only chat bodies can be written: a completions body
  (``prompt``) is refused here with its body index;
- each turn's payload is sent as ``orjson.dumps`` of the parsed line
  (``dataset/memory_map_utils.py``) with the whole message array as written
  (``MESSAGE_ARRAY_WITH_RESPONSES``): the bytes AIPerf sends equal the body's exact bytes
  when the body is compact JSON as orjson writes it (kvreplay synth's and the
  importers' bodies are); a body that is not is written as it is and counted
  (``sent re-serialized``); a body holding a line break is written on one line (orjson)
  and counted. There is no think time in the format (counted when sessions had one).

With a sessions side file the export is a folder (``--out DIR``, created; it must not
exist), one ``NNNNNN.jsonl`` per session in session order; without one, a single file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, TypeVar

import orjson

from kvreplay.errors import WorkloadError
from kvreplay.safe_io import atomic_write_bytes
from kvreplay.workload._loader import Body, load_workload
from kvreplay.workload.sessions import load_sessions

__all__ = ["export_aiperf_raw"]


class _Result(Protocol):
    """What ``export_aiperf_raw`` fills (``kvreplay.workload.peers.Exported``; not imported: no cycle)."""

    path: Path
    lines: int
    bodies: int

    def note(self, what: str) -> None:
        """Count one loss by name."""


R = TypeVar("R", bound=_Result)


def _line(b: Body, res: _Result) -> bytes:
    if b.kind != "chat":
        raise WorkloadError("is a completions body: AIPerf 0.13's raw_payload loader takes only bodies with "
                            "'messages' (export it as --aiperf-type single_turn, or synthesize with --api chat)",
                            path=b.source, body_index=b.index, field="messages")
    raw = b.raw.strip()
    if b"\n" in raw or b"\r" in raw:
        res.note("written on one line (the body held a line break)")
        return orjson.dumps(b.decoded())
    if orjson.dumps(b.decoded()) != raw:
        res.note("sent re-serialized by AIPerf (not compact JSON as orjson writes it)")
    return raw


def export_aiperf_raw(workload: str | Path, out: str | Path, res: R) -> R:
    """Write ``workload`` in AIPerf's ``raw_payload`` format (module docstring) and fill ``res``.

    Args:
        workload: The workload (its sessions side file read).
        out: The file to write, or with sessions the folder to create.
        res: The export record to fill (``path``, ``lines``, ``notes``).

    Returns:
        ``res``.

    Raises:
        WorkloadError: a bad workload, a completions body, or an existing ``out`` folder.
    """
    wl = load_workload(workload)
    ss = load_sessions(workload, len(wl))
    out = Path(out)
    res.path = out
    res.bodies = len(wl)
    if ss is None:
        lines = [_line(b, res) for b in wl.bodies]
        atomic_write_bytes(out, b"".join(x + b"\n" for x in lines))
        res.lines = len(lines)
        return res
    if out.exists():
        raise WorkloadError(f"--out {out} exists: with sessions the raw_payload export is a folder it creates",
                            path=out)
    files = []
    for sid in ss.order:
        files.append(b"".join(_line(wl.bodies[i], res) + b"\n" for i in ss.bodies[sid]))
        res.lines += len(ss.bodies[sid])
    if any(t.think_time_s for t in ss.turns):
        res.note("think times dropped (raw_payload has no delay)")
    out.mkdir(parents=False)
    for k, data in enumerate(files):
        atomic_write_bytes(out / f"{k:06d}.jsonl", data)
    return res
