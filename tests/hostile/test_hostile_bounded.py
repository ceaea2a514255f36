"""Issue 44 item 7: bounded everywhere: no SIGSEGV on a huge line, amplification said, Bailian chains linear.

- A 60 MiB OpenAI Batch line under a 1 GiB ``RLIMIT_AS`` was killed by SIGSEGV inside
  ``orjson.loads`` (the body parsed a second time while the line's own parse was held);
  it now imports, and a line whose parsed form cannot fit is refused with one line
  (``jsonscan.loads_bounded``: the standard library's allocation-checked parser where
  an address-space limit is set).
- ``kvreplay import`` says how much larger the workload is than its source.
- ``import_bailian._roots`` of a chain listed children first did a list search per step
  (quadratic: 17.7 s against 3.1 s parents first): counted here in equality tests.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from kvreplay.cli import main
from kvreplay.errors import WorkloadError
from kvreplay.workload.import_bailian import _roots

LIMIT = 1 << 30
MIB = 1 << 20


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


@pytest.mark.timeout(120)
def test_a_60_mib_batch_line_imports_under_1_gib_without_sigsegv(tmp_path: Path) -> None:
    body = b'{"model": "m", "prompt": "' + b"x" * (60 * MIB) + b'"}'
    src = tmp_path / "b.jsonl"
    src.write_bytes(b'{"custom_id": "big", "method": "POST", "url": "/v1/completions", "body": ' + body + b"}\n")
    p = subprocess.run([sys.executable, "-m", "kvreplay", "import", "openai-batch", str(src), "--out",
                        str(tmp_path / "W")], capture_output=True, text=True, timeout=120, preexec_fn=_limited)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])  # today: -11 (SIGSEGV)
    assert p.stderr == ""
    assert (tmp_path / "W" / "000000.json").read_bytes() == body


_REFUSE = textwrap.dedent("""
    import resource, sys
    from pathlib import Path
    from kvreplay.errors import WorkloadError
    from kvreplay.workload._loader import json_line
    line = b"[" + b"{}," * (8 << 20) + b"{}]"   # 24 MiB of text, 8 Mi empty dicts: over 512 MiB parsed
    with open("/proc/self/statm") as f:
        used = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + (256 << 20), resource.RLIM_INFINITY))
    try:
        json_line(line, Path("big.jsonl"), 7)
    except WorkloadError as exc:
        print(exc)
        sys.exit(2)
""")


@pytest.mark.timeout(60)
def test_a_line_too_large_to_parse_is_refused_with_one_line() -> None:
    p = subprocess.run([sys.executable, "-c", _REFUSE], capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stderr) == (2, ""), p.stderr[-2000:]  # today: -11 inside orjson.loads
    assert p.stdout == ("big.jsonl:7: line too large to parse: 24.0 MiB of JSON does not fit in the memory this "
                        "process may allocate (RLIMIT_AS, free memory)\n")


def test_loads_bounded_keeps_orjsons_verdicts_on_the_checked_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvreplay.workload import jsonscan

    monkeypatch.setattr(jsonscan, "LARGE_JSON_BYTES", 4)
    monkeypatch.setattr(jsonscan, "_address_space_limited", lambda: True)
    assert jsonscan.loads_bounded(b'{"a": [1, "\\u00e9"]}') == {"a": [1, "\u00e9"]}
    for bad in (b"[NaN, 1]", b'["\xff\xfe"]', b"[1, 2", b"[1] x"):
        with pytest.raises(orjson.JSONDecodeError):
            jsonscan.loads_bounded(bad)


class _Id(int):
    """A chat id that counts the equality tests made on it (a list search makes one per element)."""

    calls = 0

    def __eq__(self, other: object) -> bool:
        _Id.calls += 1
        return int(self) == int(other)  # type: ignore[call-overload]

    __hash__ = int.__hash__


def test_a_children_first_bailian_chain_resolves_in_linear_work() -> None:
    n = 2000
    # chat i's parent is chat i-1; listed children first; every id a distinct object, as parsed
    parent = {_Id(i): _Id(i - 1) if i else -1 for i in range(n - 1, -1, -1)}
    _Id.calls = 0
    root = _roots(parent, {c: 1 for c in parent}, Path("t.jsonl"))  # type: ignore[arg-type]
    calls = _Id.calls
    assert root == {i: 0 for i in range(n)}
    # one walk of n-1 steps, then every other start is known: a few dict probes per chat
    # (about 9 n here). A list search per step made sum(range(n)) = 1,999,000 more.
    assert calls < 20 * n, calls


def test_a_bailian_loop_is_still_refused(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="parent_chat_id chain of chat 3 loops"):
        _roots({3: 2, 2: 1, 1: 3}, {3: 1, 2: 2, 1: 3}, tmp_path / "t.jsonl")


def test_import_says_how_much_larger_the_workload_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # one conversation of 4 human turns: every body resends the whole history
    conv = [{"from": "human" if k % 2 == 0 else "gpt", "value": chr(ord("a") + k) * 100} for k in range(8)]
    src = tmp_path / "s.json"
    src.write_bytes(orjson.dumps([{"id": "c", "conversations": conv}]))
    assert main(["import", "sharegpt", str(src), "--out", str(tmp_path / "w.jsonl"), "--model", "m"]) == 0
    out = capsys.readouterr().out
    s, w = src.stat().st_size, (tmp_path / "w.jsonl").stat().st_size
    assert f"amplification: {w / s:.1f}x the source ({s:,} -> {w:,} bytes)" in out
    assert w / s > 2  # the four bodies hold 1 + 3 + 5 + 7 = 16 messages of the file's 8
