"""``--tokenizer tokenizer.json``: a local Hugging Face tokenizer through the optional ``tokenizers`` library.

Skipped when the library is not installed (it is an optional extra). The tokenizer is
trained here, in memory, on the bundled text: byte-level BPE of 2,000 ids with a BOS
added to every prompt (``<s> $A``), so decoding is exact and ``head_tokens`` is 1.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from kvreplay.errors import ConfigError
from kvreplay.workload.synth import SynthSpec, synthesize
from kvreplay.workload.synth_corpus import Length, corpus
from kvreplay.workload.token_blocks import TokenBlocks
from kvreplay.workload.tokenizer_client import LocalTokenizer, open_tokenizer

tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tokenizers import ByteLevelBPETokenizer
    from tokenizers.processors import TemplateProcessing

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator([corpus().text], vocab_size=2000, min_frequency=2, special_tokens=["<s>"],
                            show_progress=False)
    tok.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def test_synth_exact_in_a_local_tokenizer(tokenizer_json: Path) -> None:
    tok = open_tokenizer(str(tokenizer_json))
    assert isinstance(tok, LocalTokenizer)
    spec = SynthSpec(requests=6, isl=Length(120), osl=Length(4), model="m", prefix_tokens=40, prefix_groups=2)
    res = synthesize(spec, tok)
    assert res.manifest["head_tokens"] == 1  # the BOS
    ident = res.manifest["tokenizer"]
    assert (ident["dialect"], ident["source"], len(ident["vocab_sha256"])) == ("local", "tokenizer.json", 64)
    ids = [tok.prompt_ids(orjson.loads(b)["prompt"]) for b in res.bodies]
    assert [len(x) for x in ids] == [120] * 6
    for i in (2, 4):
        assert ids[i][:40] == ids[0][:40] and ids[i][40] != ids[0][40]
    assert ids[1][:40] == ids[3][:40] and ids[1][1] != ids[0][1]
    assert synthesize(spec, tok).bodies == res.bodies  # the same seed and tokenizer: the same bytes
    with pytest.raises(ConfigError, match="cannot render a chat template"):
        synthesize(SynthSpec(requests=1, isl=Length(50), osl=Length(4), model="m", api="chat"), tok)


def test_trace_blocks_in_a_local_tokenizer(tokenizer_json: Path) -> None:
    tok = open_tokenizer(str(tokenizer_json))
    blocks = TokenBlocks(tok, 16, chat=False)
    text = blocks.prompt((3, 4, 5), 40)
    ids = tok.prompt_ids(text)
    assert len(ids) == 40 and tok.prompt_ids(blocks.prompt((3, 4, 6), 40))[:32] == ids[:32]
