import kvreplay.offline as pkg


def test_all_sorted_and_importable():
    assert pkg.__all__ == sorted(pkg.__all__)
    for name in pkg.__all__:
        assert getattr(pkg, name) is not None
