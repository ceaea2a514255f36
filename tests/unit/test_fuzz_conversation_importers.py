"""Issue 30 item 8 for the importers of issue 34: ShareGPT, Bailian, AIPerf and vLLM files of any shape.

Random bytes, and JSON of random shape in each format's own envelope: an import either
writes a workload that loads (``load_workload``, with its sessions side file when it has
one) or raises ``WorkloadError`` naming the source file, and leaves nothing at ``--out``
when it refuses.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreplay.errors import WorkloadError
from kvreplay.workload import load_workload
from kvreplay.workload.import_bailian import import_bailian
from kvreplay.workload.import_sharegpt import import_sharegpt
from kvreplay.workload.peers import import_aiperf, import_vllm

FUZZ = settings(max_examples=60, deadline=5000, suppress_health_check=[HealthCheck.too_slow])
IMPORTERS = {"sharegpt": import_sharegpt, "bailian": import_bailian, "aiperf": import_aiperf, "vllm": import_vllm}

_leaf = st.none() | st.booleans() | st.integers(-3, 10**12) | st.floats(allow_nan=False) | st.text(max_size=6)
_json = st.recursive(_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                     max_leaves=12)
_turn = st.fixed_dictionaries({"from": st.sampled_from(["human", "gpt", "system", "tool", 3]), "value": _leaf})
_sharegpt = st.lists(st.fixed_dictionaries({"id": _leaf, "conversations": st.lists(_turn, max_size=4) | _json}),
                     max_size=3)
_bailian = st.fixed_dictionaries({"chat_id": _leaf, "parent_chat_id": _leaf, "turn": _leaf, "timestamp": _leaf,
                                  "input_length": _leaf, "output_length": _leaf,
                                  "hash_ids": st.lists(st.integers(-2, 50), max_size=4) | _leaf})
_aiperf = st.fixed_dictionaries({"session_id": _leaf, "text": _leaf, "delay": _leaf,
                                 "turns": st.lists(st.fixed_dictionaries({"text": _leaf, "delay": _leaf}),
                                                   max_size=3) | _leaf})
_vllm = st.fixed_dictionaries({"prompt": _leaf, "output_tokens": _leaf})


def import_or_error(kind: str, data: bytes) -> None:
    """Run one import; a refusal names the source and leaves nothing; a success loads back."""
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / ("in.json" if kind == "sharegpt" else "in.jsonl")
        src.write_bytes(data)
        out = Path(d) / "w.jsonl"
        try:
            IMPORTERS[kind](src, out)
        except WorkloadError as exc:
            assert "in.json" in str(exc), str(exc)
            assert not out.exists() and not (Path(d) / "w.sessions.jsonl").exists()
            return
        wl = load_workload(out)
        assert len(wl) >= 1


@FUZZ
@given(kind=st.sampled_from(sorted(IMPORTERS)), data=st.binary(max_size=400))
def test_random_bytes(kind: str, data: bytes) -> None:
    import_or_error(kind, data)


@FUZZ
@given(convs=_sharegpt)
def test_sharegpt_of_random_shape(convs: list) -> None:
    import_or_error("sharegpt", json.dumps(convs).encode())


@FUZZ
@given(kind=st.sampled_from(["bailian", "aiperf", "vllm"]), rows=st.data())
def test_jsonl_rows_of_random_shape(kind: str, rows: st.DataObject) -> None:
    shape = {"bailian": _bailian, "aiperf": _aiperf, "vllm": _vllm}[kind]
    lines = rows.draw(st.lists(shape | _json, min_size=1, max_size=4))
    import_or_error(kind, b"".join(json.dumps(x).encode() + b"\n" for x in lines))
