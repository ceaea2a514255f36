import pytest

from kvreplay.backends import HALOGEN_KEYS, make_backend
from kvreplay.errors import BackendError

# A /cache document shaped as issue 4 lists it (counts in the ratio quoted there:
# 437 misses x 2 + 2959 hits x 1 = 3833 stores offered, 3821 kept, 12 refused).
DOC = (
    '{"entries": 8, "bytes": 123456789, "last_entry_bytes": 4321, "max_entries": 8, '
    '"hits": 2959, "misses": 437, "stores": 3821, "evicted": 3813, '
    '"prompt_tokens_saved": 7654321, "store_ms_total": 812.5, "restore_ms_total": 401.25, '
    '"refused": 12, "rows_copied": 99, "hit_rate": 0.8713}'
)


def test_parse_maps_by_hand():
    raw, common, started = make_backend("halogen", "", None).parse(DOC)
    assert set(raw) == set(HALOGEN_KEYS)
    assert raw["hit_rate"] == 0.8713  # kept verbatim, not a common name
    assert common == {
        "hits": 2959,
        "misses": 437,
        "lookups": 3396,  # 2959 + 437
        "stores": 3821,
        "evictions": 3813,
        "refused": 12,
        "hit_tokens": 7654321,
        "entries": 8,
        "bytes": 123456789,
    }
    assert started is None


def test_missing_keys_are_absent_and_lookups_needs_both():
    _, common, _ = make_backend("halogen", "", None).parse(
        '{"hits": 3, "entries": 0, "bytes": null}'
    )
    assert common == {"hits": 3, "entries": 0}


def test_started_marker_when_present():
    _, _, started = make_backend("halogen", "", None).parse(
        '{"hits": 1, "misses": 0, "started": 17.5}'
    )
    assert started == 17.5


@pytest.mark.parametrize("text", ["[1, 2]", "not json", ""])
def test_not_an_object_raises(text):
    with pytest.raises(BackendError):
        make_backend("halogen", "", None).parse(text)
