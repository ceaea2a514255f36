"""The capture proxy's end-of-stream check (``end_marker_in``): native and pure twins answer the same.

``recorder._relay._Tally`` asks it of every read after the first token: True when the read
holds ``[DONE]`` or ``"usage"``, or when one of them is cut between the previous read and this
one (the window is the previous read's last 8 bytes and this read's first 8: a cut marker has at
most 6 bytes on either side, so every cut is found). Expected answers are derived by hand.
"""

from __future__ import annotations

import os
import random

import pytest

from kvreplay.accounting import events

MARKERS = (b"[DONE]", b'"usage"')


@pytest.fixture
def twin(helpers):
    """``end_marker_in`` of one twin (``conftest.helpers``)."""
    return helpers.end_marker_in


@pytest.mark.parametrize(("prev", "chunk", "expected"), [
    (b"", b"", False),
    (b"", b"data: [DONE]\n\n", True),
    (b"", b'data: {"choices":[],"usage":{"prompt_tokens":3}}\n\n', True),
    (b"", b'data: {"choices":[{"delta":{"content":"usage"}}]}\n\n', True),   # a token's text: the accountant decides
    (b"", b'data: {"choices":[{"delta":{"content":"[DONE"}}]}\n\n', False),
    (b"data: [DO", b"NE]\n\n", True),                 # cut 4 | 2
    (b"x" * 100 + b'"usag', b'e":{}}\n\n', True),      # cut 5 | 2, a long previous read
    # the window holds the previous read's whole marker too (harmless: that read already ended the stream)
    (b"[DONE]", b"data: {}\n\n", True),
    (b"[DONE]xyz", b"data: {}\n\n", False),           # its last 8 bytes, "DONE]xyz": no marker
    (b"data: [", b"x" * 10 + b"DONE]", False),         # not contiguous
    (b'"usage', b'"', True),                           # cut 6 | 1, a one-byte read
    (b"[", b"DONE", False),                            # incomplete
    (b"usage", b'"', False),                           # the opening quote missing
])
def test_by_hand(twin, prev, chunk, expected):
    assert twin(prev, chunk) is expected


def test_every_cut_of_each_marker(twin):
    """Each marker cut at every position, with 0-12 bytes of filler on both sides: always found."""
    for m in MARKERS:
        for cut in range(1, len(m)):
            for before in range(13):
                for after in range(13):
                    prev, chunk = b"a" * before + m[:cut], m[cut:] + b"b" * after
                    assert twin(prev, chunk) is True, (m, cut, before, after)
                    # the same bytes with one byte between the two halves: not a marker any more
                    assert twin(prev, b"#" + chunk) is False, (m, cut, before, after)


def test_twins_agree_on_fuzz():
    """Random reads built from marker pieces and SSE bytes: the twins agree on each of 20,000 pairs."""
    if os.environ.get("KVREPLAY_NO_EXTENSIONS", "") == "1":
        pytest.skip("native twin disabled by KVREPLAY_NO_EXTENSIONS=1")
    native = pytest.importorskip("kvreplay.accounting._sse_c").end_marker_in
    rnd = random.Random(43)
    pieces = [b"[", b"DONE", b"]", b'"', b"usage", b"data: ", b"\n\n", b"{}", b"[DONE]", b'"usage"', b"x", b"\x00"]
    seen = {True: 0, False: 0}
    for _ in range(20_000):
        prev = b"".join(rnd.choice(pieces) for _ in range(rnd.randrange(0, 6)))
        chunk = b"".join(rnd.choice(pieces) for _ in range(rnd.randrange(0, 6)))
        want = events.end_marker_in(prev, chunk)
        assert native(prev, chunk) is want, (prev, chunk)
        seen[want] += 1
    assert seen[True] > 1000 and seen[False] > 1000  # both answers exercised


def test_none_is_refused_by_both(twin):
    """Not bytes: a TypeError from either twin (the native one reads no memory of a None)."""
    with pytest.raises(TypeError):
        twin(None, b"data: {}")
    with pytest.raises(TypeError):
        twin(b"", None)
