"""The body-secret detector's substring hints never hide a key shape (issue 31 item 2: the proxy's cost).

``workload.secrets._in_text`` runs each of ``KEY_SHAPES`` only where a cheap substring hint
holds; a hint that is not implied by its pattern (e.g. ``"sk-"`` for a pattern that also
takes ``pk-`` and ``rk-``, or a case-sensitive ``"Bearer"``) would let a key through. Each
case below is a key that the pattern alone finds; the property compares the hinted search
with the patterns alone on text made of the shapes' fragments.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreplay.workload.secrets import KEY_SHAPES, _in_text


def unhinted(s: str) -> str | None:
    return next((kind for kind, pat in KEY_SHAPES if pat.search(s)), None)


@pytest.mark.parametrize("text, kind", [
    ("x pk-abcdefgh12345678 y", "sk- key"),
    ("rk-ABCDEFGH1234567890", "sk- key"),
    ("sk-ant-abcdefghij0123456", "sk-ant- key"),
    ("auth: BEARER abcdefghij0123456789", "Bearer token"),
    ("bEaReR\tabcdefghij0123456789", "Bearer token"),
    ("ASIAABCDEFGHIJ012345", "AWS access key id"),
    ("İ bearer abcdefghij0123456789", "Bearer token"),  # a character whose lower case is two long
    ("sk-abcdefghijklmno1", "sk- key"),  # 19 characters: the shortest text a key shape matches
    ("AKIAABCDEFGHIJ012345", "AWS access key id"),  # 20
])
def test_every_shape_and_case_is_still_found(text, kind):
    assert unhinted(text) == kind
    assert _in_text(text, ()) == kind


_FRAGMENTS = st.sampled_from(["sk-", "pk-", "rk-", "k-", "ant-", "Bearer", "BEARER", "bearer", "BeArEr", " ", "\t",
                              "AKIA", "ASIA", "abcdefgh", "ABCDEFGH", "0123", "9", "_", "-", "İ", "K", "é", "\n"])


@settings(max_examples=400, deadline=None)
@given(parts=st.lists(_FRAGMENTS, max_size=24))
def test_hinted_search_equals_the_patterns_alone(parts):
    s = "".join(parts)
    assert _in_text(s, ()) == unhinted(s)
