"""A worker's display events batched for the coordinator and replayed into its observer."""

from kvreplay.runner.observer import ForwardingObserver, replay_events, slim_record


class Recorder:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        if not name.startswith("on_"):
            raise AttributeError(name)
        return lambda *a: self.calls.append((name, *a))


def _rec(pos, status="ok", cached=7):
    return {"phase": "p", "position": pos, "sent": True, "status": status, "ttft_ns": 1000 + pos,
            "error": None, "worker": 1, "usage": {"cached_tokens": cached, "prompt_tokens": 9},
            "body_sha256": "x" * 64, "token_ns": [1, 2, 3]}


def test_events_wait_for_a_flush_and_arrive_in_order():
    sent = []
    fwd = ForwardingObserver(sent.append)
    fwd.on_phase_start("p", 3, 2)
    fwd.on_request_start("p", 0)
    fwd.on_record(_rec(0))
    assert sent == []  # batched: nothing leaves the worker before a flush
    fwd.flush()
    fwd.flush()  # nothing new: nothing sent
    assert len(sent) == 1 and [e[0] for e in sent[0]] == ["phase", "start", "rec"]
    fwd.on_message("abort: deadline")
    fwd.on_phase_end({"name": "p"})  # a phase end flushes
    assert sent[1] == [("msg", "abort: deadline")]


def test_slim_record_keeps_only_what_the_display_reads():
    slim = slim_record(_rec(4))
    assert slim == {"phase": "p", "position": 4, "sent": True, "status": "ok", "ttft_ns": 1004, "error": None,
                    "worker": 1, "usage": {"cached_tokens": 7}}


def test_replay_tells_each_phase_start_once_and_everything_else_as_sent():
    a, b = [], []
    wa, wb = ForwardingObserver(a.extend), ForwardingObserver(b.extend)
    for w, pos in ((wa, 0), (wb, 1)):
        w.on_phase_start("p", 2, 2)
        w.on_request_start("p", pos)
        w.on_record(_rec(pos, status="ok" if pos == 0 else "cut"))
        w.flush()
    wb.on_drain("p", {"passed": True})
    wb.flush()
    obs, seen = Recorder(), set()
    replay_events(a, obs, seen)
    replay_events(b, obs, seen)
    names = [c[0] for c in obs.calls]
    assert names == ["on_phase_start", "on_request_start", "on_record", "on_request_start", "on_record", "on_drain"]
    assert obs.calls[0] == ("on_phase_start", "p", 2, 2)
    assert [c[1]["status"] for c in obs.calls if c[0] == "on_record"] == ["ok", "cut"]
