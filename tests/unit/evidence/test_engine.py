"""The engine's rules one by one, on hand-written deltas (``kvreplay.evidence.engine``)."""

from __future__ import annotations

from rundirs_evidence import write_run

from kvreplay.evidence import ABSENT, COUNTER_NAMES, HOST_KEYS, RESTORE_KEYS, TIERS
from kvreplay.evidence.engine import (
    SentBodies,
    common_tier,
    counter_value,
    delta_evidence,
    tiers_present,
    usable_delta,
)
from kvreplay.experiments.findings import load_views
from kvreplay.runner import backend


def test_vocabulary_has_one_home():
    # runner.backend re-exports the names; they are the same objects, not copies
    assert backend.COUNTER_NAMES is COUNTER_NAMES
    assert RESTORE_KEYS["host"] is HOST_KEYS and TIERS == ("host", "device", "usage") and ABSENT == "absent"


def test_a_reset_delta_is_void_and_absent_is_not_zero():
    d = {"hit_tokens": 384, "query_tokens": 400, "reset": True, "reset_names": ["query_tokens"]}
    assert usable_delta(d) is None and counter_value(d, "hit_tokens") is None
    ev = delta_evidence("rev", d)
    assert ev.tiers == () and ev.absent == {"counter": "the server restarted during the phase"}
    assert ev.restored is None
    assert counter_value({"hit_tokens": 0}, "hit_tokens") == 0.0
    assert counter_value({"hit_tokens": 0}, "hits") is None
    assert counter_value({"reset": False, "hits": True}, "hits") is None  # a bool is no figure


def test_sent_bodies_repeats_and_replays_per_incarnation():
    led = SentBodies()
    assert led.phase("I1", ["a", "b", "a"]).repeats == (False, False, True)
    assert led.phase("I1", ["a", "b"]).replay is True
    partly = led.phase("I1", ["b", "c"])
    assert (partly.repeats, partly.replay) == ((True, False), False)
    # another incarnation starts empty; a phase that sent nothing is no replay
    assert led.phase("I2", ["a"]).replay is False and led.phase("I1", []).replay is False
    # a body sent twice inside the phase is a repeat but does not make it a replay
    assert led.phase("I3", ["z", "z"]).replay is False


def test_tiers_present_and_the_common_tier():
    host = {"host_lookups": 4, "host_fetched_tokens": 0, "lookups": 4, "hit_tokens": 0}
    dev_only = {"host_lookups": 0, "host_fetched_tokens": 0, "lookups": 4, "hit_tokens": 9}
    assert tiers_present([dev_only]) == {"host": False, "device": True}
    assert tiers_present([dev_only, host]) == {"host": True, "device": True}
    assert tiers_present([{**host, "reset": True}]) == {"host": False, "device": False}
    evs = [delta_evidence("a", host), delta_evidence("b", dev_only)]
    assert common_tier(evs) == "device" and common_tier(evs[:1]) == "host" and common_tier([]) is None


def test_findings_per_request_reset_in_a_repeat_voids_the_phase(tmp_path):
    dev = {"lookups": 2, "hit_tokens": 5}
    write_run(tmp_path / "A", [("prime", "forward", [0, 1], {"lookups": 2, "hit_tokens": 0}),
                               ("replay", "forward", [0, 1], {**dev, "reset": True, "reset_names": ["lookups"]})],
              attribution="per_request")
    views = load_views(tmp_path, [{"name": "A", "kind": "run", "status": "measured", "run_dir": "A",
                                   "comparable": True, "incarnation": "A"}])
    assert views[1].repeats == 2
    assert views[1].evidence is None and views[1].note == "the server restarted during the phase"
