"""Issue 17: hostile servers end every run within bounds, one valid record per position, no key anywhere.

Each case is one mode of ``hostile.server.HostileServer`` on 127.0.0.1; ``kvreplay
run`` runs it in a subprocess at C1 and C4 (4 planned positions, API key from
the environment, connect/read timeouts 3 s, whole-request bound ``TOTAL`` s)
and the test asserts, per case:

- the run ends within its bound (seconds: a fixed allowance plus, for cases
  that are ended by the whole-request bound, that bound per round of
  positions);
- records.jsonl holds exactly one record per planned position (0..3), each a
  JSON object with the schema's keys, with the expected ``status`` (and
  ``http_status``), and an error text holding the expected words;
- summary.json is present, parses and counts the 4 records;
- the exit code (3 where the run aborts, e.g. on HTTP 401);
- neither the key nor any 8-character piece of it is in any file of the run
  directory, in stdout or in stderr;
- no ESC / CSI control byte from the server reaches stderr or report.md;
- the client's peak RSS stays under 400 MB (``ru_maxrss``; a run here takes
  about 90 MB).

Key-echo and redirect cases run over https too, with a self-signed
certificate made here (``openssl``) and trusted through ``--ca-file``.
docs/reliability.md lists every case and its outcome.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from hostile.harness import KEY, N_BODIES, leaked, make_workload, run_case
from hostile.server import HostileServer

TOTAL = 1.5
"""Whole-request bound (s) given to every hostile run (``--total-timeout``)."""
MAX_RSS_KIB = 400 << 10

# mode: (status, http_status, words in the error, exit code, ended by the total timeout)
CASES: dict[str, tuple[str, int | None, str | None, int, bool]] = {
    "ok": ("ok", 200, None, 0, False),
    "negative_chunk": ("malformed", 200, "malformed_http: Invalid character in chunk size", 0, False),
    "overlong_chunk_size": ("malformed", 200, "malformed_http: Chunk size overflow", 0, False),
    "endless_chunk_line": ("malformed", 200, "malformed_http: chunk framing over 65536 bytes", 0, False),
    "huge_headers": ("malformed", None, "malformed_http: response head over 65536 bytes", 0, False),
    "endless_headers": ("malformed", None, "malformed_http: response head over 65536 bytes", 0, False),
    "slowloris": ("timeout", None, "client_total_timeout", 0, True),
    "gzip_bomb": ("malformed", 200, "invalid JSON", 0, False),
    "duplicate_content_length": ("malformed", None, "malformed_http: Duplicate Content-Length", 0, False),
    "negative_content_length": ("malformed", None, "malformed_http: Invalid character in Content-Length", 0, False),
    "te_and_content_length": ("malformed", None, "malformed_http: Transfer-Encoding can't be present", 0, False),
    "http10_close": ("ok", 200, None, 0, False),
    "continue_flood": ("malformed", None, "malformed_http: over 16 interim (1xx) responses", 0, False),
    "reset_before_response": ("write", None, "Connection reset by peer", 0, False),
    "reset_mid_stream": ("cut", 200, "Response payload is not completed", 0, False),
    "nul_bytes": ("malformed", 200, "unexpected control character", 0, False),
    "invalid_utf8": ("malformed", 200, "not valid UTF-8", 0, False),
    "deep_json": ("malformed", 200, "depth limit exceeded", 0, False),
    "endless_stream": ("timeout", 200, "client_total_timeout", 0, True),
    "terminal_escapes": ("http", 500, "boom", 0, False),
    "status_out_of_range": ("malformed", None, "malformed_http: Invalid response status", 0, False),
    "usage_out_of_range": ("malformed", 200, "usage value out of range", 0, False),
    "redirect_307": ("http", 307, "redirect not followed: HTTP 307, Location: http://127.0.0.1:9/elsewhere", 0, False),
    "key_echo_401": ("http", 401, "bad key: [REDACTED]", 3, False),
    "key_echo_500_cut": ("http", 500, "eeee", 0, False),
    "key_echo_sse_error": ("stream_error", 200, "upstream said [REDACTED]", 0, False),
    "key_echo_content": ("ok", 200, None, 0, False),
    "key_echo_json": ("ok", 200, None, 0, False),
}
HTTPS_CASES = ["key_echo_401", "key_echo_500_cut", "key_echo_sse_error", "key_echo_content", "key_echo_json",
               "redirect_307"]
RECORD_KEYS = {"phase", "position", "body_index", "sent", "status", "http_status", "error", "t_sent_ns",
               "t_done_ns", "text_head", "usage_raw", "timings"}


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_workload(tmp_path_factory.mktemp("hostile") / "wl")


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not found (needed to make the self-signed certificate)")
    d = tmp_path_factory.mktemp("tls")
    crt, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(crt), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return str(crt), str(key)


def _check(mode: str, conc: int, res, requests: int) -> None:
    status, http_status, words, code, by_total = CASES[mode]
    rounds = -(-N_BODIES // conc)
    bound = 12 + (rounds * TOTAL if by_total else 0)
    assert res.seconds <= bound, f"{mode} C{conc}: {res.seconds:.1f} s > {bound} s"
    assert res.code == code, res.stderr[-2000:]
    recs = res.records
    assert sorted(r["position"] for r in recs) == list(range(N_BODIES))
    for r in recs:
        if r["status"] == "aborted":  # the 401 abort stops positions not yet sent (C1)
            assert mode == "key_echo_401" and r["sent"] is False
            continue
        assert set(r) >= RECORD_KEYS, sorted(RECORD_KEYS - set(r))
        assert (r["status"], r["http_status"]) == (status, http_status), (r["status"], r["error"])
        if words is None:
            assert r["error"] is None
        else:
            assert words in r["error"], r["error"]
    # each position sent once: nothing re-sent (a fresh connection's reset is not retried), no redirect followed
    assert requests == (1 if mode == "key_echo_401" and conc == 1 else N_BODIES)
    if mode == "key_echo_401":
        assert [r["status"] for r in recs][:1] == ["http"]
        assert sum(r["status"] == "http" for r in recs) == (1 if conc == 1 else N_BODIES)
    summary = orjson.loads((res.out / "summary.json").read_bytes())
    assert summary["records"] == N_BODIES
    assert leaked(res) == [], f"key found in {leaked(res)}"
    assert res.rss_kib < MAX_RSS_KIB
    report = (res.out / "report.md").read_bytes()
    for text in (res.stderr.encode(), report):
        assert b"\x1b" not in text and "\x9b".encode() not in text


@pytest.mark.parametrize("conc", [1, 4])
@pytest.mark.parametrize("mode", sorted(CASES))
def test_hostile_http(mode: str, conc: int, workload: Path, tmp_path: Path) -> None:
    with HostileServer(mode) as srv:
        res = run_case(srv.url, workload, tmp_path / "run", conc, extra=["--total-timeout", str(TOTAL)])
        requests = srv.requests
    _check(mode, conc, res, requests)


@pytest.mark.parametrize("conc", [1, 4])
@pytest.mark.parametrize("mode", HTTPS_CASES)
def test_hostile_https(mode: str, conc: int, workload: Path, tmp_path: Path, cert: tuple[str, str]) -> None:
    with HostileServer(mode, tls=cert) as srv:
        res = run_case(srv.url, workload, tmp_path / "run", conc,
                       extra=["--total-timeout", str(TOTAL), "--ca-file", cert[0]])
        requests = srv.requests
    _check(mode, conc, res, requests)


def test_https_without_the_ca_is_a_connect_error(workload: Path, tmp_path: Path, cert: tuple[str, str]) -> None:
    with HostileServer("ok", tls=cert) as srv:
        res = run_case(srv.url, workload, tmp_path / "run", 1, extra=["--total-timeout", str(TOTAL)])
    assert res.code == 0
    assert [r["status"] for r in res.records] == ["connect"] * N_BODIES
    assert "CERTIFICATE_VERIFY_FAILED" in res.records[0]["error"]


# mode: (backend, the notice on stderr): the counter read fails or leaves the value out; requests are unaffected
METRICS_CASES = {
    "metrics_nan": ("vllm", "counter vllm:prefix_cache_hits_total is not a finite number (NaN or infinite): left out"),
    "metrics_many_labels": ("vllm", "counter read failed: scrape refused: line 7 has over 128 labels"),
    "metrics_long_line": ("vllm", "counter read failed: scrape refused: line 7 is over 65536 characters"),
    "metrics_many_series": ("vllm", "counter read failed: scrape refused: 400004 series (at most 100000)"),
    "cache_nan": ("halogen", "counter hit_tokens is not a finite number (NaN or infinite): left out"),
    "cache_deep": ("halogen", "counter read failed: /cache body is not JSON: maximum recursion depth exceeded"),
    "cache_huge": ("halogen", "counter hits is invalid for deltas (hits: outside the 64-bit range)"),
    "cache_strings": ("halogen", "counter entries is invalid for deltas (entries: not a number (text 'three'))"),
    "metrics_huge": ("vllm", "counter hit_tokens is invalid for deltas "
                             "(vllm:prefix_cache_hits_total: outside the 64-bit range)"),
}

# mode: (raw text kept in counters.jsonl's first line, the phase's counter_delta)
INVALID_CASES = {
    "cache_huge": ({"hits": "18446744073709551617", "misses": 2, "entries": 3, "max_entries": 8,
                    "stores": "-1180591620717411303424"},
                   {"misses": 0.0, "entries": 3.0, "invalid": {
                       "hits": "hits: outside the 64-bit range", "lookups": "hits: outside the 64-bit range",
                       "stores": "stores: outside the 64-bit range"}}),
    "cache_strings": ({"hits": "12", "misses": 2, "entries": "three", "max_entries": 8},
                      {"misses": 0.0, "invalid": {"entries": "entries: not a number (text 'three')",
                                                  "hits": "hits: not a number (text '12')",
                                                  "lookups": "hits: not a number (text '12')"}}),
    "metrics_huge": ({"vllm:prefix_cache_queries_total": 10,
                      "vllm:prefix_cache_hits_total": "18446744073709551617",
                      "vllm:num_requests_running": 0, "vllm:num_requests_waiting": 0},
                     {"query_tokens": 0.0, "running": 0.0, "waiting": 0.0,
                      "invalid": {"hit_tokens": "vllm:prefix_cache_hits_total: outside the 64-bit range"}}),
}


@pytest.mark.parametrize("conc", [1, 4])
@pytest.mark.parametrize("mode", sorted(METRICS_CASES))
def test_hostile_metrics(mode: str, conc: int, workload: Path, tmp_path: Path) -> None:
    backend, notice = METRICS_CASES[mode]
    with HostileServer(mode) as srv:
        res = run_case(srv.url, workload, tmp_path / "run", conc, quiet=False,
                       extra=["--backend", backend, "--total-timeout", str(TOTAL)])
    assert res.code == 0, res.stderr[-2000:]
    assert res.seconds <= 15
    assert [r["status"] for r in sorted(res.records, key=lambda r: r["position"])] == ["ok"] * N_BODIES
    assert notice in res.stderr
    summary = orjson.loads((res.out / "summary.json").read_bytes())
    assert summary["records"] == N_BODIES
    assert (res.out / "report.html").exists()  # NaN counters must not break the HTML report
    assert res.rss_kib < MAX_RSS_KIB
    assert leaked(res) == []


@pytest.mark.parametrize("mode", sorted(INVALID_CASES))
def test_counters_of_any_size_keep_raw_text_and_null_deltas(mode: str, workload: Path, tmp_path: Path) -> None:
    """Issue 30 item 2: a 2^64+1 or text counter is raw text in the log, a null delta with its reason; all ok."""
    series, delta = INVALID_CASES[mode]
    with HostileServer(mode) as srv:
        res = run_case(srv.url, workload, tmp_path / "run", 1, quiet=False,
                       extra=["--backend", METRICS_CASES[mode][0], "--total-timeout", str(TOTAL)])
    assert res.code == 0, res.stderr[-2000:]
    assert [r["status"] for r in res.records] == ["ok"] * N_BODIES
    assert [r["counter_delta"] for r in res.records] == [delta] * N_BODIES
    first = orjson.loads((res.out / "counters.jsonl").read_bytes().splitlines()[0])
    assert first["series"] == series
    summary = orjson.loads((res.out / "summary.json").read_bytes())
    assert summary["phases"][0]["counter_delta"] == delta
    assert summary["phases"][0]["valid"] is True
    assert summary["records"] == N_BODIES
    for name, why in delta["invalid"].items():  # the report names the series
        assert f"{name} invalid for deltas: {why}" in (res.out / "report.md").read_text()


def test_a_duplicate_series_is_invalid_never_summed(workload: Path, tmp_path: Path) -> None:
    """Issue 44 item 3: a series printed twice (same name and labels) is invalid with its reason, and so is
    the phase; before, the two were summed (query_tokens 2x) and the phase was valid."""
    why = ("vllm:prefix_cache_queries_total: duplicate series (the same name and labels twice in one "
           "exposition); not summed")
    with HostileServer("metrics_duplicate") as srv:
        res = run_case(srv.url, workload, tmp_path / "run", 1, quiet=False,
                       extra=["--backend", "vllm", "--total-timeout", str(TOTAL)])
    assert [r["status"] for r in res.records] == ["ok"] * N_BODIES
    delta = {"hit_tokens": 0.0, "running": 0.0, "waiting": 0.0, "invalid": {"query_tokens": why}}
    assert [r["counter_delta"] for r in res.records] == [delta] * N_BODIES
    phase = orjson.loads((res.out / "summary.json").read_bytes())["phases"][0]
    assert phase["counter_delta"] == delta
    assert phase["valid"] is False
    assert phase["invalid_reasons"] == [f"invalid exposition: query_tokens: {why}"]
    assert res.code == 0, res.stderr[-2000:]


def test_a_replica_that_vanishes_mid_phase_invalidates_it(workload: Path, tmp_path: Path) -> None:
    """Issue 44 item 5: the router still answers, one replica stops answering its counter reads after 6:
    the run aborts (``replica_lost``, exit 3, as a vanished single server's run does) and the phase is invalid
    naming the replica; before, the phase was valid with no counters and the exit status 0."""
    with HostileServer("ok") as router, HostileServer("ok") as one, HostileServer("ok", vanish_after=6) as two:
        res = run_case(router.url, workload, tmp_path / "run", 1, quiet=False,
                       extra=["--backend", "vllm", "--replica", one.url, "--replica", two.url])
    assert res.code == 3, res.stderr[-2000:]
    summary = orjson.loads((res.out / "summary.json").read_bytes())
    assert summary["aborted"]["reason"] == "replica_lost"
    assert summary["aborted"]["message"].startswith(f"replica {two.url} could not be read: "), summary["aborted"]
    phase = summary["phases"][0]
    assert phase["valid"] is False
    assert phase["invalid_reasons"] == [f"replica_lost: {summary['aborted']['message']}"]


def test_hard_deadline_within_a_second_of_an_endless_stream(workload: Path, tmp_path: Path) -> None:
    """No whole-request bound: the hard deadline (2 s) alone ends the endless streams."""
    with HostileServer("endless_stream") as srv:
        res = run_case(srv.url, workload, tmp_path / "run", 4, extra=["--hard-deadline", "2s"])
    assert res.code == 3
    summary = orjson.loads((res.out / "summary.json").read_bytes())
    assert summary["aborted"]["reason"] == "hard_deadline"
    assert 2.0 <= summary["wall_s"] <= 3.0
    recs = sorted(res.records, key=lambda r: r["position"])
    assert [r["status"] for r in recs] == ["aborted"] * N_BODIES
    # cancelled in flight: the real send time and the partial stream are kept
    assert all(r["sent"] and r["t_sent_ns"] is not None and r["chunks"] > 10 for r in recs)


def test_two_interrupts_end_an_endless_stream_within_a_second(workload: Path, tmp_path: Path) -> None:
    import os
    import signal
    import sys
    import time

    from hostile.harness import HERE

    out = tmp_path / "run"
    with HostileServer("endless_stream") as srv:
        t_start = time.monotonic()
        p = subprocess.Popen([sys.executable, str(HERE / "_rss_main.py"), str(tmp_path / "rss"), "run",
                              str(workload), "--target", srv.url, "--backend", "none", "--phase", "p:forward:c4",
                              "--out", str(out), "--quiet", "--api-key-env", "HOSTILE_KEY"],
                             env={**os.environ, "HOSTILE_KEY": KEY, "MPLBACKEND": "Agg"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while not (out / "records.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # requests in flight, streaming
        p.send_signal(signal.SIGINT)
        time.sleep(0.2)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=20)
        code = p.returncode
        took = time.monotonic() - t0
    assert code == 3
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["aborted"]["reason"] == "interrupt"
    assert summary["records"] == N_BODIES
    # the run (its clock starts after the process did) ended within a second of the second SIGINT
    assert summary["wall_s"] <= (t0 - t_start) + 1.0
    assert took <= 10  # report drawing and interpreter exit included
    assert [r["status"] for r in res_records(out)] == ["aborted"] * N_BODIES


def res_records(out: Path) -> list[dict]:
    return sorted((orjson.loads(ln) for ln in (out / "records.jsonl").read_bytes().splitlines()),
                  key=lambda r: r["position"])


def test_a_server_resetting_every_connection_aborts_after_three_transport_failures(tmp_path, workload):
    """Issue 27 item 1 at its default: 3 consecutive sends that never got a response byte abort the phase."""
    with HostileServer("reset_before_response") as srv:
        res = run_case(srv.url, workload, tmp_path / "run", 1, extra=["--max-transport-failures", "3"])
    assert res.code == 3, res.stderr[-2000:]
    recs = sorted(res.records, key=lambda r: r["position"])
    assert [r["position"] for r in recs] == list(range(N_BODIES))
    assert [(r["sent"], r["status"]) for r in recs[:3]] == [(True, "write")] * 3
    assert all((r["sent"], r["status"], r["error"]) == (False, "aborted", "transport") for r in recs[3:])
    summary = orjson.loads((tmp_path / "run" / "summary.json").read_bytes())
    assert summary["aborted"]["reason"] == "transport"
    assert summary["phases"][0]["failed_transport"] == 3 and summary["phases"][0]["failed_output"] == 0
