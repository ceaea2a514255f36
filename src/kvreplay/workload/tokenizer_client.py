"""A model's tokenizer reached without a download: a server's tokenize endpoint, or a local ``tokenizer.json``.

``kvreplay synth`` and ``kvreplay import ... --tokenizer`` size text in the *server's*
tokens through this one module. :func:`open_tokenizer` takes either

- the base URL of a server (``http://host:port``, credentials in the URL allowed and
  redacted everywhere they are shown). Recognised dialects, tried in this order:

  ========== ============================================ ====================================
  dialect    tokenize                                     detokenize / chat
  ========== ============================================ ====================================
  ``vllm``   ``POST /tokenize`` ``{"prompt"}`` or         ``POST /detokenize`` ``{"tokens"}``
             ``{"model","messages"}`` ->                  -> ``{"prompt"}``; chat through
             ``{"tokens","count"}``                       ``/tokenize`` with ``messages``
  ``sim``    as vLLM (``kvreplay serve-sim``; its         as vLLM
             ``/version`` names ``kvreplay-sim``)
  ``llama``  ``POST /tokenize`` ``{"content",             ``POST /detokenize`` ``{"tokens"}``
             "add_special"}`` -> ``{"tokens"}``           -> ``{"content"}``; chat through
             (llama.cpp's llama-server)                   ``POST /apply-template`` -> ``{"prompt"}``
  ========== ============================================ ====================================

  Sources: vLLM ``vllm/entrypoints/openai/protocol.py`` (``TokenizeCompletionRequest``,
  ``TokenizeChatRequest``, ``DetokenizeRequest``); llama.cpp ``tools/server/README.md``
  (``/tokenize``, ``/detokenize``, ``/apply-template``).

- ``sim``: the embedded simulator's tokenizer in process (:class:`SimTokenizer`, the ids
  ``serve-sim`` gives), for workloads replayed with ``--target sim``;
- the path of a local Hugging Face ``tokenizer.json`` (the optional ``tokenizers``
  library, ``pip install kvreplay[tokenizers]``); it cannot render a chat template.

Counts follow what the server bills as ``usage.prompt_tokens``: :meth:`Tokenizer.prompt_ids`
includes the special tokens a completions request adds (a BOS), :meth:`Tokenizer.encode`
does not (the ids text is cut on).

The identity of a tokenizer (:meth:`Tokenizer.identity`) is what it was (dialect, model,
source with credentials redacted) and a hash: of the vocabulary for a local file
(SHA-256 of its sorted ``token -> id`` pairs), and, for a server, which exposes no
vocabulary, a fingerprint (SHA-256 of the ids of :data:`FINGERPRINT_TEXT`).
"""

from __future__ import annotations

import base64
import hashlib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson

from kvreplay.errors import ConfigError
from kvreplay.redaction import redact_url, register

__all__ = ["FINGERPRINT_TEXT", "HttpTokenizer", "LocalTokenizer", "SimTokenizer", "Tokenizer", "common_prefix_len",
           "open_tokenizer"]

FINGERPRINT_TEXT = ("The quick brown fox jumps over the lazy dog; 0123456789 "
                    "\u00e9t\u00e9, \u4e2d\u6587, {\"key\": [1, 2.5]}\n\tdef f(x): return x**2\n")
"""A fixed text whose token ids identify a server's tokenizer (letters, digits, accents, CJK, JSON, code)."""

_TIMEOUT_S = 30.0
_MAX_RESPONSE_BYTES = 64 << 20


class Tokenizer(Protocol):
    """What synth and the importers ask of a tokenizer (all counts in tokens)."""

    model: str | None
    """The server's model id (``/v1/models``), or None for a local file."""
    dialect: str
    """``vllm``, ``sim``, ``llama`` or ``local``."""

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without special tokens."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``."""
        ...

    def prompt_ids(self, text: str) -> list[int]:
        """Ids of ``text`` as a completions ``prompt`` (special tokens included)."""
        ...

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Ids of ``messages`` rendered with the generation prompt.

        Raises:
            ConfigError: this tokenizer cannot render a chat template.
        """
        ...

    def identity(self) -> dict[str, Any]:
        """What the tokenizer is: ``dialect``, ``model``, ``source`` (redacted), ``vocab_sha256`` or ``fingerprint``."""
        ...


class HttpTokenizer:
    """A server's tokenize endpoints (dialect found by :meth:`connect`).

    Args:
        url: Base URL (``http://[user:pass@]host:port``); a path after the host is kept as
            a prefix, but for a final ``/v1`` (an OpenAI base URL: the tokenize endpoints
            are at the root). Userinfo is sent as HTTP basic auth and registered as a secret.

    Raises:
        ConfigError: not an http(s) URL.
    """

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"--tokenizer: {redact_url(url)!r} is neither an http(s) URL nor a tokenizer.json file")
        self.shown = redact_url(url)
        self._headers = {"Content-Type": "application/json"}
        if parts.username or parts.password:
            user = urllib.parse.unquote(parts.username or "")
            pw = urllib.parse.unquote(parts.password or "")
            register(pw)
            self._headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()
        netloc = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        if ":" in (parts.hostname or "") and not netloc.startswith("["):
            netloc = f"[{parts.hostname}]" + ("" if parts.port is None else f":{parts.port}")
        path = parts.path.rstrip("/")
        path = path.removesuffix("/v1")  # an OpenAI base URL: the tokenize endpoints are at the server's root
        self._base = urllib.parse.urlunsplit((parts.scheme, netloc, path, "", ""))
        self.dialect = ""
        self.model: str | None = None

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else orjson.dumps(body)
        req = urllib.request.Request(self._base + path, data=data, method=method, headers=self._headers)
        try:
            with urllib.request.urlopen(req, timeout=_TIMEOUT_S) as resp:  # noqa: S310 - http(s) checked above
                status, raw = resp.status, resp.read(_MAX_RESPONSE_BYTES)
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read(4096)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ConfigError(f"--tokenizer {self.shown}: {method} {path} failed: {reason}") from None
        try:
            return status, orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            return status, None

    def _post(self, path: str, body: Any) -> Any:
        status, obj = self._call("POST", path, body)
        if status != 200 or not isinstance(obj, dict):
            raise ConfigError(f"--tokenizer {self.shown}: POST {path} answered HTTP {status}"
                              + ("" if isinstance(obj, dict) else " without a JSON object"))
        return obj

    def connect(self) -> HttpTokenizer:
        """Read the model (``GET /v1/models``) and find the dialect of ``/tokenize``.

        Returns:
            self.

        Raises:
            ConfigError: the server is unreachable or has no usable tokenize endpoint.
        """
        status, models = self._call("GET", "/v1/models")
        if status == 200 and isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
            first = models["data"][0]
            if isinstance(first, dict) and isinstance(first.get("id"), str):
                self.model = first["id"]
        is_sim = False
        if status == 200 and isinstance(models, dict) and isinstance(models.get("data"), list) and models["data"]:
            is_sim = isinstance(models["data"][0], dict) and models["data"][0].get("owned_by") == "kvreplay"
        status, obj = self._call("POST", "/tokenize", {"prompt": "Hello world", **self._model_field()})
        if status == 200 and isinstance(obj, dict) and isinstance(obj.get("tokens"), list) and obj["tokens"]:
            self.dialect = "sim" if is_sim else "vllm"
            return self
        status, obj = self._call("POST", "/tokenize", {"content": "Hello world"})
        if status == 200 and isinstance(obj, dict) and isinstance(obj.get("tokens"), list) and obj["tokens"]:
            self.dialect = "llama"
            return self
        raise ConfigError(f"--tokenizer {self.shown}: no POST /tokenize answering {{\"prompt\"}} (vLLM, serve-sim) "
                          f"or {{\"content\"}} (llama-server) (last answer HTTP {status})")

    def _model_field(self) -> dict[str, str]:
        return {"model": self.model} if self.model else {}

    def _ids(self, obj: dict[str, Any], path: str) -> list[int]:
        toks = obj.get("tokens")
        if not isinstance(toks, list):
            raise ConfigError(f"--tokenizer {self.shown}: POST {path} answered without a 'tokens' list")
        # llama-server answers [{"id", "piece"}] when asked for pieces; plain ids otherwise
        return [t["id"] if isinstance(t, dict) else t for t in toks]

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without special tokens (``add_special_tokens`` / ``add_special`` false)."""
        if self.dialect == "llama":
            return self._ids(self._post("/tokenize", {"content": text, "add_special": False}), "/tokenize")
        body = {"prompt": text, "add_special_tokens": False, **self._model_field()}
        return self._ids(self._post("/tokenize", body), "/tokenize")

    def prompt_ids(self, text: str) -> list[int]:
        """Ids of ``text`` as a completions prompt (special tokens included, as the server adds them)."""
        if self.dialect == "llama":
            return self._ids(self._post("/tokenize", {"content": text, "add_special": True}), "/tokenize")
        return self._ids(self._post("/tokenize", {"prompt": text, **self._model_field()}), "/tokenize")

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (``POST /detokenize``)."""
        obj = self._post("/detokenize", {"tokens": list(ids), **self._model_field()})
        text = obj.get("content" if self.dialect == "llama" else "prompt")
        if not isinstance(text, str):
            raise ConfigError(f"--tokenizer {self.shown}: POST /detokenize answered without its text")
        return text

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Ids of the rendered chat prompt (vLLM, sim: ``/tokenize`` with messages; llama: ``/apply-template``)."""
        if self.dialect == "llama":
            status, obj = self._call("POST", "/apply-template", {"messages": messages})
            prompt = obj.get("prompt") if status == 200 and isinstance(obj, dict) else None
            if not isinstance(prompt, str):
                raise ConfigError(f"--tokenizer {self.shown}: this server cannot render its chat template "
                                  f"(POST /apply-template answered HTTP {status} without a 'prompt'), so chat "
                                  f"prompts cannot be sized exactly; {self._chat_overhead()}; use --api completions")
            # as the chat endpoint tokenizes the rendered template: special tokens added and parsed
            return self._ids(self._post("/tokenize", {"content": prompt, "add_special": True,
                                                      "parse_special": True}), "/tokenize")
        body = {"messages": messages, "add_generation_prompt": True, **self._model_field()}
        return self._ids(self._post("/tokenize", body), "/tokenize")

    def _chat_overhead(self) -> str:
        """What one chat request says the template adds: its ``usage.prompt_tokens`` less the content's tokens."""
        content = "Hello world"
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": 1, "stream": False,
                **self._model_field()}
        status, obj = self._call("POST", "/v1/chat/completions", body)
        usage = obj.get("usage") if isinstance(obj, dict) else None
        billed = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if status != 200 or not isinstance(billed, int):
            return f"a chat request to measure the template's overhead answered HTTP {status} without usage"
        n = len(self.encode(content))
        return (f"one chat request of a {n}-token message was billed {billed} prompt tokens: the template adds "
                f"{billed - n} (measured from usage.prompt_tokens)")

    def identity(self) -> dict[str, Any]:
        """Dialect, model, the redacted URL and the fingerprint of :data:`FINGERPRINT_TEXT`."""
        ids = self.encode(FINGERPRINT_TEXT)
        fp = hashlib.sha256(orjson.dumps(ids)).hexdigest()
        return {"dialect": self.dialect, "model": self.model, "source": self.shown, "fingerprint": fp,
                "fingerprint_of": "SHA-256 of the JSON list of ids of a fixed probe text "
                                  "(the server shows no vocabulary)"}


class LocalTokenizer:
    """A Hugging Face ``tokenizer.json`` read with the optional ``tokenizers`` library.

    Raises:
        ConfigError: ``tokenizers`` is not installed or the file cannot be read.
    """

    dialect = "local"

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer as HfTokenizer  # optional extra
        except ImportError:
            raise ConfigError("--tokenizer: a tokenizer.json needs the optional 'tokenizers' library "
                              "(pip install 'kvreplay[tokenizers]'), or give a server URL") from None
        try:
            self._tok = HfTokenizer.from_file(str(path))
        except Exception as exc:  # the library raises its own exception types
            raise ConfigError(f"--tokenizer {path.name}: cannot read it as a tokenizer.json: {exc}") from None
        self.path = path
        self.model: str | None = None

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without special tokens."""
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens kept)."""
        return str(self._tok.decode(list(ids), skip_special_tokens=False))

    def prompt_ids(self, text: str) -> list[int]:
        """Ids of ``text`` with the post-processor's special tokens (a BOS)."""
        return list(self._tok.encode(text, add_special_tokens=True).ids)

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Always raises: a tokenizer.json holds no chat template to render.

        Raises:
            ConfigError: always.
        """
        raise ConfigError("--tokenizer: a local tokenizer.json cannot render a chat template; use --api completions, "
                          "or give the URL of the server (vLLM /tokenize, llama-server /apply-template)")

    def identity(self) -> dict[str, Any]:
        """Dialect ``local``, the file's name and the SHA-256 of its sorted vocabulary."""
        vocab = sorted(self._tok.get_vocab(with_added_tokens=True).items())
        digest = hashlib.sha256(orjson.dumps(vocab)).hexdigest()
        return {"dialect": "local", "model": None, "source": self.path.name, "vocab_sha256": digest}


class SimTokenizer:
    """The embedded simulator's tokenizer, in process (``--tokenizer sim``, for ``--target sim``).

    The same ids as a ``kvreplay serve-sim`` answers (``kvreplay.sim.tokenizer``), so a
    workload written through either is the same bytes.
    """

    dialect = "sim"

    def __init__(self) -> None:
        from kvreplay.sim.config import SimConfig

        self.model: str | None = SimConfig().model

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``."""
        from kvreplay.sim.tokenizer import tokenize_text

        return list(tokenize_text(text))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ids this process produced.

        Raises:
            ConfigError: an id it never produced.
        """
        from kvreplay.sim.tokenizer import detokenize

        try:
            return detokenize(ids)
        except ValueError as exc:
            raise ConfigError(f"--tokenizer sim: {exc}") from None

    def prompt_ids(self, text: str) -> list[int]:
        """Ids of ``text`` as a completions prompt (the simulator adds no special token)."""
        return self.encode(text)

    def chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Ids of the simulator's chat template rendered with the generation prompt."""
        from kvreplay.sim.tokenizer import render_messages

        return list(render_messages(messages).tokens)

    def identity(self) -> dict[str, Any]:
        """Dialect ``sim``, its model and the fingerprint a ``serve-sim`` URL gives too."""
        fp = hashlib.sha256(orjson.dumps(self.encode(FINGERPRINT_TEXT))).hexdigest()
        return {"dialect": "sim", "model": self.model, "source": "sim (in process)", "fingerprint": fp,
                "fingerprint_of": "SHA-256 of the JSON list of ids of a fixed probe text "
                                  "(the server shows no vocabulary)"}


def open_tokenizer(spec: str) -> Tokenizer:
    """The tokenizer named by ``--tokenizer``: ``sim``, an http(s) URL of a server, or a local ``tokenizer.json``.

    Args:
        spec: The option's value.

    Returns:
        A connected :class:`HttpTokenizer` or a :class:`LocalTokenizer`.

    Raises:
        ConfigError: unreachable server, no tokenize endpoint, missing file or library.
    """
    if spec == "sim":
        return SimTokenizer()
    if spec.startswith(("http://", "https://")):
        return HttpTokenizer(spec).connect()
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"--tokenizer: {redact_url(spec)!r} is neither an http(s) URL nor an existing "
                          "tokenizer.json file (a model is never downloaded)")
    return LocalTokenizer(path)


def common_prefix_len(a: list[int], b: list[int]) -> int:
    """How many leading token ids two sequences share (tokens)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
