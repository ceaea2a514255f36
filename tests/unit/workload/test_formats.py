"""The importer registry: ``kvreplay import`` takes its formats, their options and output from it."""

from __future__ import annotations

import pytest

from kvreplay.cli import main
from kvreplay.workload.formats import (
    BUILTIN,
    ImportFormat,
    format_names,
    format_of,
    register_format,
    unregister_format,
)


def test_builtin_formats_in_order():
    assert [f.name for f in BUILTIN] == ["mooncake", "har", "openai-batch", "sharegpt", "bailian", "aiperf", "vllm"]
    assert format_names() == ("mooncake", "har", "openai-batch", "sharegpt", "bailian", "aiperf", "vllm")
    assert format_of("har").options == ("paths", "redact_body_secrets")  # issue 30 item 4


def test_a_toy_format_is_offered_and_run_through_the_registry_alone(tmp_path, capsys):
    seen = {}

    def toy(source: str, out: str, *, limit: int | None, paths: tuple[str, ...]) -> list[str]:
        seen.update(source=source, out=out, limit=limit, paths=paths)
        return [f"toy: {source} -> {out}", "plan -> nowhere"]

    register_format(ImportFormat("toy", "a toy format for the test", ("limit", "paths"), toy))
    try:
        with pytest.raises(SystemExit):
            main(["import", "--help"])
        assert "toy: a toy format for the test" in " ".join(capsys.readouterr().out.split())
        rc = main(["import", "toy", "src.txt", "--out", str(tmp_path / "W"), "--limit", "3",
                   "--paths", "/v1/a, /v1/b"])
        assert rc == 0
        assert seen == {"source": "src.txt", "out": str(tmp_path / "W"), "limit": 3, "paths": ("/v1/a", "/v1/b")}
        assert capsys.readouterr().out == f"toy: src.txt -> {tmp_path / 'W'}\nplan -> nowhere\n"
        with pytest.raises(ValueError, match="already registered"):
            register_format(ImportFormat("toy", "again", (), toy))
    finally:
        unregister_format("toy")
    assert "toy" not in format_names()
    with pytest.raises(ValueError, match="cannot unregister"):
        unregister_format("har")
