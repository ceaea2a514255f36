"""kvreplay.redaction: secrets replaced by the marker, before and after a cut; control characters escaped."""

import base64

import pytest

from kvreplay import redaction as R

KEY = "sk-live-0123456789abcdef"


@pytest.fixture(autouse=True)
def _clean():
    R.clear()
    yield
    R.clear()


def test_nothing_registered_leaves_text_alone():
    assert R.redact(f"a {KEY} b") == f"a {KEY} b"
    assert R.redact_bytes(KEY.encode()) == KEY.encode()


def test_whole_key_and_a_cut_prefix_are_replaced():
    R.register(KEY)
    assert R.redact(f"echo: Bearer {KEY}!") == "echo: Bearer [REDACTED]!"
    # a 1 KiB cut left the first 9 characters of the key at the end
    assert R.redact("x" * 10 + KEY[:9]) == "x" * 10 + "[REDACTED]"
    # 3 characters are below MIN_PREFIX: kept
    assert R.redact("abc sk-") == "abc sk-"
    assert R.redact_bytes(b'{"e":"' + KEY.encode() + b'"}') == b'{"e":"[REDACTED]"}'


def test_obj_keys_and_values():
    R.register(KEY)
    got = R.redact_obj({KEY: [1, f"u{KEY}", {"n": 2}], "k": None})
    assert got == {"[REDACTED]": [1, "u[REDACTED]", {"n": 2}], "k": None}


def test_headers_register_bearer_and_basic():
    R.register_headers({"Authorization": f"Bearer {KEY}"})
    assert KEY in R.secrets()
    R.clear()
    R.register_headers({"Authorization": "Basic " + base64.b64encode(b"alice:hunter2pw").decode()})
    assert R.redact("user alice:hunter2pw pw hunter2pw") == "user [REDACTED] pw [REDACTED]"


def test_url_userinfo():
    assert R.redact_url("https://bob:pw@h:8443/v1") == "https://[REDACTED]@h:8443/v1"
    assert R.redact_url("http://h:1/x@y") == "http://h:1/x@y"


def test_check_secret_strips_and_refuses_controls():
    assert R.check_secret(f"  {KEY}\n", field="--api-key-file") == KEY
    with pytest.raises(ValueError, match="control character \\(code 10\\) at offset 3") as ei:
        R.check_secret("abc\nX-Injected: 1", field="--api-key-file")
    assert "Injected" not in str(ei.value)


def test_escape_controls():
    assert R.escape_controls("a\x1b[2Jb\tc\x9bd\x7f") == "a\\x1b[2Jb\tc\\x9bd\\x7f"
    assert R.escape_controls("l1\nl2", newlines=True) == "l1\\x0al2"


def test_a_secret_under_min_secret_is_refused_never_silently_kept():
    # 2c: a 1-3 character secret can be neither redacted (it would rewrite ordinary text) nor kept.
    assert R.MIN_SECRET == 4
    for short in ("a", "ab", "abc"):
        with pytest.raises(ValueError) as ei:
            R.register(KEY, short)
        n = len(short)
        assert str(ei.value) == (f"a secret of {n} character{'s' if n > 1 else ''} is too short to keep out of "
                                 "kvreplay's outputs (at least 4); use a longer one")
        assert R.secrets() == ()  # nothing of the refused call is registered, not even the long key
    R.register("abcd", "", None)  # exactly 4: accepted and redacted; empty and None ignored
    assert R.secrets() == ("abcd",)
    assert R.redact("x abcd y") == "x [REDACTED] y"


def test_basic_header_with_a_short_password_is_refused():
    with pytest.raises(ValueError, match="a secret of 2 characters is too short"):
        R.register_headers({"Authorization": "Basic " + base64.b64encode(b"alice:pw").decode()})
    assert R.secrets() == ()


def test_redact_url_replaces_userinfo_and_secret_query_values():
    from kvreplay.redaction import redact_url, url_secrets

    assert redact_url("http://u:pw-1234@h:1/v1?api_key=K-5678&model=m;token=T-9012#f") == (
        "http://[REDACTED]@h:1/v1?api_key=[REDACTED]&model=m;token=[REDACTED]#f")
    assert redact_url("http://h:1/?model=m") == "http://h:1/?model=m"
    assert url_secrets("http://u:pw-1234@h:1/?api_key=K%2F5678&x=1") == ["u:pw-1234", "pw-1234", "K%2F5678", "K/5678"]
    assert url_secrets("http://tok-abcd@h:1") == ["tok-abcd"]
    assert url_secrets("http://h:1/?model=m") == []


def test_register_url_refuses_a_short_secret_and_registers_the_rest():
    import pytest

    from kvreplay.redaction import clear, redact, register_url

    clear()
    try:
        with pytest.raises(ValueError, match="3 characters"):
            register_url("http://h:1/?api_key=abc")
        register_url("http://u:pw-1234@h:1/?sig=SIG-5678")
        assert redact("a pw-1234 b SIG-5678 c") == "a [REDACTED] b [REDACTED] c"
    finally:
        clear()


def test_join_url_puts_a_base_query_after_the_path():
    from kvreplay.backends._http import join_url

    assert join_url("http://h:1/?api_key=K", "/metrics") == "http://h:1/metrics?api_key=K"
    assert join_url("http://h:1/?api_key=K", "/cache?x=1") == "http://h:1/cache?x=1&api_key=K"
    assert join_url("http://h:1/", "/metrics") == "http://h:1/metrics"


def test_snapshot_never_prints_a_servers_key_from_a_label(tmp_path, capsys):
    """Issue 44 low: a server's own key in an info label (never registered: kvreplay never had it) is
    replaced by the marker in every parsed sample: snapshot's identity and raw series."""
    from kvreplay.cli import main

    key = "sk-proj-7Qx2b9LmT4vN8aZr"
    dump = tmp_path / "metrics.txt"
    dump.write_text("# TYPE vllm:cache_config_info gauge\n"
                    f'vllm:cache_config_info{{block_size="16",owner="{key}",hf_token="hf_abcdefgh1234"}} 1\n'
                    "# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total 10\n")
    assert main(["snapshot", "--from-file", str(dump), "--backend", "vllm"]) == 0
    out = capsys.readouterr().out
    assert key[:8] not in out and "hf_abcdefgh" not in out, out
    assert ('vllm:cache_config_info{block_size="16",owner="[REDACTED]",hf_token="[REDACTED]"}' in out
            or '"owner": "[REDACTED]"' in out), out


def test_redact_labels_rule():
    from kvreplay.redaction import maybe_secret_labels, redact_labels

    labels = {"model": "m", "api_key": "abcd", "owner": "sk-0123456789abcdefgh", "note": "sk-short",
              "auth": "Bearer abcdefghij", "name": "key_a"}
    assert redact_labels(labels) == {"model": "m", "api_key": "[REDACTED]", "owner": "[REDACTED]",
                                     "note": "sk-short", "auth": "[REDACTED]", "name": "key_a"}
    assert maybe_secret_labels('x{owner="sk-0123"} 1') and maybe_secret_labels('x{api_key="a"} 1')
    assert not maybe_secret_labels('vllm:x{model="m",engine="0"} 1')


def test_urls_inside_a_command_line_are_registered():
    """A user command (an arm's switch, a check) keeps its text in experiment.json and ab.json: its URLs'
    secrets are registered from it."""
    from kvreplay.experiments.ab.arms import parse_arm
    from kvreplay.redaction import clear, redact, register_urls_in

    clear()
    try:
        register_urls_in("curl -sf 'http://chk:pw-check-1234@127.0.0.1:9/health' && wget https://h/?token=tok-5678")
        arm = parse_arm("on=./switch.sh --url http://u:pw-arm-9012@h:1 on")
        assert arm.cmd == "./switch.sh --url http://u:pw-arm-9012@h:1 on"  # sent as given
        assert redact(f"x pw-check-1234 tok-5678 {arm.cmd}") == (
            "x [REDACTED] [REDACTED] ./switch.sh --url http://[REDACTED]@h:1 on")
    finally:
        clear()
