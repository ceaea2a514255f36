"""The body-secret detector remembers long strings' key-shape verdicts, never a credential's (issue 31 item 2).

``workload.secrets._in_text`` keeps the key-shape verdict of each string of at least
``_SEEN_MIN`` characters (a capture's bodies repeat their system prompt and earlier turns);
the request's own credentials differ from request to request and are looked for every time.
"""

from __future__ import annotations

import orjson

from kvreplay.workload import secrets
from kvreplay.workload.secrets import find_secrets

PROMPT = "You are a helpful assistant. " * 60  # 1,740 characters: remembered
OWN = "tok_live_0123456789abcdef"


def body(system: str, user: str = "hi") -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "system", "content": system},
                                                    {"role": "user", "content": user}]})


def test_a_credential_is_found_in_a_string_remembered_without_it():
    text = PROMPT + OWN
    assert len(text) >= secrets._SEEN_MIN
    assert find_secrets(body(text), []) == []  # remembered: no key shape
    (f,) = find_secrets(body(text), [OWN])  # the same string, now the request's own credential
    assert (f.kind, f.where) == ("the request's own credential", "messages[0].content")
    assert find_secrets(body(text), []) == []  # and not remembered as a secret


def test_a_remembered_key_shape_is_found_again():
    text = PROMPT + " sk-abcdefghij0123456789"
    for _ in range(2):
        (f,) = find_secrets(body(text))
        assert (f.kind, f.where) == ("sk- key", "messages[0].content")


def test_short_strings_are_not_remembered_and_the_memory_is_capped(monkeypatch):
    monkeypatch.setattr(secrets, "_seen", {})
    monkeypatch.setattr(secrets, "_seen_chars", 0)
    monkeypatch.setattr(secrets, "_SEEN_CAP", 5000)
    find_secrets(body("x" * (secrets._SEEN_MIN - 1)))
    assert secrets._seen == {}
    for i in range(6):  # 6 strings of 1,740 characters, 2 fit under 5,000
        find_secrets(body(PROMPT + str(i)))
        assert secrets._seen_chars <= 5000
    assert secrets._seen_chars == sum(map(len, secrets._seen)) == 2 * (len(PROMPT) + 1)
    assert set(secrets._seen) == {PROMPT + "4", PROMPT + "5"}  # forgotten all at once when full
