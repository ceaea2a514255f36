"""records.jsonl: the writer (flushed per record, redacted, short writes undone) and the readers (torn last line)."""

from __future__ import annotations

import errno

import orjson
import pytest

from kvreplay import redaction
from kvreplay.rundir import RecordStream, RecordWriter, iter_records, read_records

KEY = "sk-rundir-3b9e41f07c2a5d68-RECORDS"


@pytest.fixture
def secret():
    redaction.clear()
    redaction.register_headers({"Authorization": f"Bearer {KEY}"})
    try:
        yield KEY
    finally:
        redaction.clear()


def test_each_record_is_on_disk_as_one_whole_line_when_write_returns(tmp_path):
    path = tmp_path / "records.jsonl"
    w = RecordWriter(path)
    try:
        for i in range(3):
            w.write({"position": i, "status": "ok"})
            # read by path (a new handle, as a reader after a kill -9 would), before close
            assert path.read_bytes().count(b"\n") == i + 1
            assert path.read_bytes().endswith(b'{"position":%d,"status":"ok"}\n' % i)
    finally:
        w.close()
    assert w.count == 3 and w.lost == 0


def test_writer_redacts_a_registered_secret_wherever_the_record_holds_it(tmp_path, secret):
    path = tmp_path / "records.jsonl"
    w = RecordWriter(path)
    # the shapes a key-echoing server produces: in text, in a usage key and value, in an error
    w.write({"position": 0, "text_head": f"your key {secret}", "usage_raw": {secret: secret},
             "error": f"bad key: Bearer {secret}"})
    w.close()
    data = path.read_bytes()
    assert secret.encode() not in data and secret[:12].encode() not in data
    rec = orjson.loads(data)
    assert rec == {"position": 0, "text_head": "your key [REDACTED]", "usage_raw": {"[REDACTED]": "[REDACTED]"},
                   "error": "bad key: [REDACTED]"}


class _ShortFile:
    """A file whose second ``write`` writes only half its bytes (a file-size limit, a full disk)."""

    def __init__(self, f):
        self.f, self.calls = f, 0

    def write(self, b):
        self.calls += 1
        return self.f.write(b if self.calls != 2 else b[: len(b) // 2])

    def __getattr__(self, name):
        return getattr(self.f, name)


def test_a_short_write_is_cut_back_to_the_last_whole_record_and_later_records_are_lost(tmp_path):
    path = tmp_path / "records.jsonl"
    errors = []
    w = RecordWriter(path, on_error=errors.append)
    w._f = _ShortFile(w._f)
    for i in range(4):
        w.write({"position": i})
    w.close()
    assert path.read_bytes() == b'{"position":0}\n'
    assert (w.count, w.lost) == (1, 3)
    assert len(errors) == 1 and errors[0].errno == errno.ENOSPC
    assert "short write of a record (7 of 15 bytes)" in str(errors[0])


def test_readers_skip_a_torn_last_line(tmp_path):
    path = tmp_path / "records.jsonl"
    whole = [{"phase": "a", "position": i, "status": "ok"} for i in range(5)]
    data = b"".join(orjson.dumps(r) + b"\n" for r in whole)
    path.write_bytes(data + b'{"phase": "a", "position": 5, "sta')  # killed in the middle of a write
    assert read_records(path) == whole
    assert list(iter_records(path)) == whole
    stream = RecordStream(path)
    assert list(stream) == whole and list(stream) == whole  # re-iterable: the file is read again
    assert len(read_records(path)) == 5


def test_readers_of_a_missing_or_empty_file(tmp_path):
    assert read_records(tmp_path / "none.jsonl") == []
    assert list(iter_records(tmp_path / "none.jsonl")) == []
    (tmp_path / "empty.jsonl").write_bytes(b"\n\n")
    assert read_records(tmp_path / "empty.jsonl") == []
