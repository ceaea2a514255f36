"""safe_io.atomic_write_json: the exact bytes written, and a planted symlink at the temporary name."""

import pytest

from kvreplay.safe_io import atomic_write_json


def test_writes_two_space_json_with_a_final_newline_and_string_keys(tmp_path):
    path = tmp_path / "ab.json"
    atomic_write_json(path, {"a": [1, 2.5], 3: None})
    assert path.read_bytes() == b'{\n  "a": [\n    1,\n    2.5\n  ],\n  "3": null\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ab.json"]  # no ab.json.tmp left


def test_a_symlink_at_the_temporary_name_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "verdict.json.tmp").symlink_to(victim)
    atomic_write_json(tmp_path / "verdict.json", [])
    assert victim.read_text() == "precious\n"
    assert (tmp_path / "verdict.json").read_bytes() == b"[]\n"


def test_an_unserializable_value_writes_nothing(tmp_path):
    path = tmp_path / "x.json"
    path.write_bytes(b"old\n")
    with pytest.raises(TypeError):
        atomic_write_json(path, {"x": object()})
    assert path.read_bytes() == b"old\n"


def test_a_stale_temporary_file_is_replaced_and_a_str_path_is_taken(tmp_path):
    """A ``.tmp`` left by a crash makes the exclusive open fail once: it is removed and the write goes on."""
    from kvreplay.safe_io import atomic_write_bytes

    (tmp_path / "000001.json.tmp").write_bytes(b"half a body from before the crash")
    atomic_write_bytes(str(tmp_path / "000001.json"), b'{"model":"m"}', fsync=False)
    assert (tmp_path / "000001.json").read_bytes() == b'{"model":"m"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000001.json"]


def test_a_folder_at_the_temporary_name_is_an_error_and_the_target_is_kept(tmp_path):
    from kvreplay.safe_io import atomic_write_bytes

    (tmp_path / "a.json").write_bytes(b"old")
    (tmp_path / "a.json.tmp").mkdir()
    with pytest.raises(OSError):
        atomic_write_bytes(tmp_path / "a.json", b"new")
    assert (tmp_path / "a.json").read_bytes() == b"old"
    assert (tmp_path / "a.json.tmp").is_dir()  # not removed: it is not ours to delete


def test_a_str_path_with_a_final_slash_names_the_file(tmp_path):
    from kvreplay.safe_io import atomic_write_bytes

    atomic_write_bytes(str(tmp_path / "t") + "/", b"new", fsync=False)
    assert (tmp_path / "t").read_bytes() == b"new"
