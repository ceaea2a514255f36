"""Issue 30 item 8: the Prometheus and halogen counter parsers keep every value exactly (property tests).

``tests/unit/test_fuzz_backends.py`` holds that only ``BackendError`` escapes; here the
values: a captured ``/metrics`` dump with one sample's value replaced by a random integer
below 2^53 (exact in a double), with comment lines and blank lines inserted at random and
CRLF line ends, parses to the same series with that one value changed; a ``/cache``
document with random non-negative integers gives them back. Budget:
``KVREPLAY_FUZZ_EXAMPLES`` (default 40), as in ``test_fuzz_capture.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreplay.backends import HALOGEN_KEYS, parse_dump

ROOT = Path(__file__).resolve().parents[2]
DUMPS = {p.parent.name: p.read_text() for p in sorted((ROOT / "fixtures" / "metrics").glob("*/*.prom"))}
FUZZ = settings(max_examples=int(os.environ.get("KVREPLAY_FUZZ_EXAMPLES", "40")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def _samples(text: str) -> list[int]:
    return [i for i, ln in enumerate(text.splitlines()) if ln and not ln.startswith("#")]


@FUZZ
@given(st.sampled_from(sorted(DUMPS)), st.data(), st.integers(0, 2**53 - 1),
       st.lists(st.sampled_from(["", "# HELP x y", "# just a comment"]), max_size=5), st.booleans())
def test_one_sample_changed_changes_exactly_that_value(family, data, value, inserts, crlf):
    text = DUMPS[family]
    _, _, base, _, _ = parse_dump(text, family)
    lines = text.splitlines()
    i = data.draw(st.sampled_from(_samples(text)))
    head, _, old = lines[i].rpartition(" ")
    if "}" in old or not head:  # a timestamp or an odd sample: keep the dump as it is
        return
    lines[i] = f"{head} {value}"
    for ins in inserts:
        lines.insert(data.draw(st.integers(0, len(lines))), ins)
    changed = ("\r\n" if crlf else "\n").join(lines) + "\n"
    _, _, raw, _, _ = parse_dump(changed, family)
    diff = {k for k in set(base) | set(raw) if base.get(k) != raw.get(k)}
    assert len(diff) <= 1
    key = head.split(" ")[0] if "{" not in head else head
    hit = [k for k in raw if raw[k] == value and (k == key or k.replace(" ", "") == key.replace(" ", ""))]
    assert hit or value == base.get(key), (key, value)


@FUZZ
@given(st.fixed_dictionaries({}, optional={k: st.integers(0, 2**53 - 1) for k in HALOGEN_KEYS}))
def test_halogen_cache_values_come_back_exactly(doc):
    if not doc:
        return
    try:
        _, _, raw, _, _ = parse_dump(json.dumps(doc), "halogen")
    except Exception as exc:  # a document lacking a required key is refused, never misread
        from kvreplay.errors import BackendError

        assert isinstance(exc, BackendError)
        return
    for k, v in doc.items():
        if k in raw:
            assert raw[k] == v
