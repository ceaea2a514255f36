"""Flat-memory sets of sent bodies (issue 32): the same answers as the sets they replace.

``replay_orders`` and the compact plan's first-entry-per-body now work over
sorted 16-byte keys (``evidence.KeySet``); each test pins the exact result on a
small hand-made input and compares it with the set/list logic that came before
(kept here as ``_old_replay_orders`` / ``_old_first_of_each``).
"""

from __future__ import annotations

import hashlib
import pickle
from typing import Any

import numpy as np
import orjson
import pytest

from kvreplay.evidence import KEY, KeySet, SentBodies, replay_orders
from kvreplay.plan import Offsets
from kvreplay.rundir import compact_plan
from kvreplay.rundir import planfile as pf


def _sha(i: int) -> str:
    return hashlib.sha256(b"body %d" % i).hexdigest()


A, B, C, D, E = (_sha(i) for i in range(5))


def _old_replay_orders(summary: dict[str, Any], plan: dict[str, Any] | None,
                       records: list[dict[str, Any]]) -> dict[str, str]:
    """``evidence.engine.replay_orders`` as it was before issue 32 (sets of hex strings)."""
    not_comparable = {p.get("name") for p in summary.get("phases") or []
                      if p.get("comparable") is False or p.get("label") == "prime"}
    out: dict[str, str] = {}
    ledger = SentBodies()
    specs = [s for s in (plan or {}).get("phases") or [] if s.get("sequence")]
    prime = lambda n: n == "prime" or n.startswith("prime")  # noqa: E731
    if specs:
        for spec in specs:
            sends = ledger.phase(None, [s["body_sha256"] for s in spec["sequence"]])
            if sends.replay and not prime(spec["name"]) and spec["name"] not in not_comparable:
                out[spec["name"]] = str(spec.get("order", "forward"))
        return out
    by_phase: dict[str, list[str]] = {}
    for r in records:
        if r.get("sent", True) and r.get("body_sha256"):
            by_phase.setdefault(str(r.get("phase")), []).append(r["body_sha256"])
    for ph in summary.get("phases") or []:
        sends = ledger.phase(None, by_phase.get(ph.get("name", ""), []))
        if sends.replay and not prime(ph.get("name", "")) and ph.get("name", "") not in not_comparable:
            out[ph.get("name", "")] = "unknown"
    return out


# Five bodies A-E; "odd" values (upper-case hex, a short text) stand beside the digests.
PHASES = [
    ("prime", "forward", [A, B, C, "NOT-HEX", A.upper()]),
    ("fwd", "forward", [A, B, C]),  # every body sent before: a replay
    ("part", "forward", [C, D]),  # D is new: not a replay
    ("rev", "reverse", [D, C, B, A, "NOT-HEX"]),  # all sent before (D by "part"): a replay
    ("odd", "shuffle:3", [A.upper(), B]),  # the upper-case text was sent by prime, as text
    ("low", "forward", [A.upper().lower(), E]),  # E never sent before
    ("skip", "reverse", [B, A]),  # a replay, but comparable: false in the summary
    ("again", "forward", [E]),  # E sent by "low": a replay
]
EXPECTED = {"fwd": "forward", "rev": "reverse", "odd": "shuffle:3", "again": "forward"}


def _plan() -> dict[str, Any]:
    return {"phases": [{"name": n, "order": o, "sequence": [
        {"position": p, "body_index": 0, "body_sha256": h, "repetition": 0} for p, h in enumerate(seq)]}
        for n, o, seq in PHASES]}


def _summary() -> dict[str, Any]:
    return {"phases": [{"name": n, **({"comparable": False} if n == "skip" else {})} for n, _, _ in PHASES]}


def test_replay_orders_of_a_five_body_plan_match_the_set_logic():
    plan, summary = _plan(), _summary()
    assert replay_orders(summary, plan, []) == EXPECTED == _old_replay_orders(summary, plan, [])


def test_replay_orders_over_a_compact_plan_read_the_flat_digests():
    # The compact plan's Entries hold 32-byte digests: the keys come from them, not from strings.
    plan = compact_plan(orjson.dumps(_plan()))
    assert plan is not None and isinstance(plan["phases"][0]["sequence"], pf.Entries)
    assert plan["phases"][0]["sequence"].other  # the two odd values are kept as dicts
    assert replay_orders(_summary(), plan, []) == EXPECTED


def test_replay_orders_from_records_match_the_set_logic():
    recs = [{"phase": n, "body_sha256": h} for n, _, seq in PHASES for h in seq]
    recs.append({"phase": "part", "body_sha256": E, "sent": False})  # not sent: does not count
    want = {k: "unknown" for k in EXPECTED}
    assert replay_orders(_summary(), None, recs) == want == _old_replay_orders(_summary(), None, recs)


def test_a_single_phase_and_an_empty_phase_are_no_replays():
    one = {"phases": [{"name": "main", "sequence": [{"body_sha256": A}]}]}
    assert replay_orders({"phases": [{"name": "main"}]}, one, []) == {}
    two = {"phases": [{"name": "a"}, {"name": "b"}]}
    assert replay_orders(two, None, [{"phase": "a", "body_sha256": A}]) == {}  # b sent nothing


def test_keys_compare_all_16_bytes():
    # Keys differing only in their last byte, 0 against 1: fixed-width S16, so trailing zero bytes count.
    k0 = bytes(15) + b"\x00"
    k1 = bytes(15) + b"\x01"
    s = KeySet(np.array([k1], dtype=KEY))
    got = KeySet(np.array([k0], dtype=KEY))
    assert not got.issubset(s) and KeySet(np.array([k1], dtype=KEY)).issubset(s)
    # The key is the digest's first 128 bits: two values equal there are one body (the limit, pinned).
    assert KeySet.of([A[:32] + "0" * 32]).issubset(KeySet.of([A]))


def test_add_first_marks_first_sightings_in_send_order():
    ks = KeySet.of([B])
    batch = np.frombuffer(b"".join(bytes.fromhex(h[:32]) for h in (A, B, A, C, C)), dtype=KEY)
    assert ks.add_first(batch).tolist() == [True, False, False, True, False]
    assert ks.add_first(batch).tolist() == [False] * 5
    assert ks.keys.tolist() == sorted(bytes.fromhex(h[:32]) for h in (A, B, C))


def _old_first_of_each(data: bytes) -> list[dict[str, Any]]:
    """The compact plan's first entry per body with the seen-set of before (one sequence)."""
    span = data[pf._SEQ.search(data).end():]  # type: ignore[union-attr]
    span = span[:span.find(b"]")]
    seen: set[Any] = set()
    out = []
    for em in pf._ENTRY.finditer(span):
        raw = em.group(0)
        sm = pf._SHA.search(raw)
        k = sm.group(1) if sm else raw
        key: Any = int(k[:32], 16) if len(k) == 64 and pf._HEX.fullmatch(k) else k
        if key not in seen:
            seen.add(key)
            out.append(orjson.loads(raw))
    return out


@pytest.mark.parametrize("batch", [1, 2, 3, 16384])
def test_compact_plan_keeps_the_first_entry_of_each_body_in_send_order(monkeypatch, batch):
    seq = [A, B, A, "abcd", C, B, A.upper(), D, "abcd", E, C, A.upper()]  # "abcd", A.upper(): keys as text
    entries = [{"position": p, "body_index": ord(h[0]), "body_sha256": h, "repetition": 0}
               for p, h in enumerate(seq)]
    entries.insert(3, {"position": 3, "body_index": 9, "repetition": 0})  # no body_sha256: its bytes are the key
    for p, e in enumerate(entries):
        e["position"] = p
    entries.append(dict(entries[3], position=len(entries)))  # same bytes but for its position: new
    data = orjson.dumps({"phases": [{"name": "m", "sequence": entries}]}, option=orjson.OPT_INDENT_2)
    monkeypatch.setattr(pf._FirstOfEach, "BATCH", batch)
    got = compact_plan(data)
    assert got is not None
    uniq = list(got["phases"][0]["sequence"])
    # by hand: A B (no sha) abcd C A.upper() D E (no sha, other position: other bytes)
    want_positions = [0, 1, 3, 4, 5, 7, 8, 10, 13]
    assert [e["position"] for e in uniq] == want_positions
    assert uniq == _old_first_of_each(data)


def test_compact_plan_file_reads_the_same_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(pf._FirstOfEach, "BATCH", 2)
    data = orjson.dumps(_plan(), option=orjson.OPT_INDENT_2)
    (tmp_path / "plan.json").write_bytes(data)
    got = pf.compact_plan_file(tmp_path / "plan.json")
    assert got == compact_plan(data)
    assert [len(p["sequence"]) for p in got["phases"]] == [len(dict.fromkeys(s)) for _, _, s in PHASES]


def test_offsets_read_like_the_tuple_they_replace():
    t = (0, 500_000_000, 1_000_000_000)
    o = Offsets(t)
    assert o == t and t == o and o == Offsets(list(t)) and o != (0, 500_000_000)
    assert hash(o) == hash(t) and o[-1] == 1_000_000_000 and o[1:] == t[1:] and len(o) == 3
    assert list(o) == list(t) and type(o[0]) is int
    assert pickle.loads(pickle.dumps(o)) == t
    with pytest.raises(OverflowError):
        Offsets([1 << 63])
