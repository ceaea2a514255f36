"""The checks and helpers of a run's orchestration: the target, the API key, the run directory, the contract.

Each refuses a bad value before anything is made or sent (``ConfigError`` naming the flag);
``kvreplay.api.runflow.run_async`` calls them, and the other commands that talk to a target
(probe, ab, snapshot) share them through ``kvreplay.api.run``.
"""

from __future__ import annotations

import base64
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

from kvreplay.errors import ConfigError
from kvreplay.redaction import check_secret, redact_url, register, register_headers, register_url
from kvreplay.rundir import RECORDS
from kvreplay.runner.observer import NullObserver, PlainObserver, RunObserver

__all__ = ["MAX_KEY_FILE_BYTES", "KeySource", "QuietOption", "check_ca_file", "check_out_dir", "check_target",
           "contract_options", "default_out", "make_observer", "open_backend", "read_api_key", "sim_run_extra",
           "split_credentials"]


class KeySource(Protocol):
    """Options naming where the API key is (``RunConfig``, or another command's options of those names)."""

    @property
    def api_key_env(self) -> str | None:
        """The environment variable holding the key (``--api-key-env``)."""

    @property
    def api_key_file(self) -> str | None:
        """The file holding the key (``--api-key-file``)."""


class QuietOption(Protocol):
    """Options saying whether to print progress (``RunConfig``, or another command's of that name)."""

    @property
    def quiet(self) -> bool:
        """Print nothing (``--quiet``)."""

def contract_options(args: object, settings: dict[str, Any], plan_path: str | None) -> dict[str, Any]:
    """RunOptions fields of the execution contract from the command line over a plan's settings.

    Raises:
        ConfigError: a bad pin (command line or the plan's ``[identity]``).
    """
    from kvreplay.runner.identity import parse_pin, pins_from_mapping

    pins = list(pins_from_mapping(settings["identity"], source=f"{plan_path} [identity]")
                if settings.get("identity") else ())
    cli_pins = [parse_pin(t) for t in getattr(args, "expect_identity", None) or ()]
    pins = [p for p in pins if p.key not in {c.key for c in cli_pins}] + cli_pins  # the command line wins
    malformed = getattr(args, "abort_on_malformed", None)
    mode = getattr(args, "on_check_fail", None)
    return {
        "identity_pins": tuple(pins),
        "abort_on_malformed": bool(settings.get("abort_on_malformed", False) if malformed is None else malformed),
        "on_check_fail": mode or settings.get("on_check_fail", "skip"),
    }


def check_target(target: str, *, sim: bool) -> None:
    """Refuse a ``--target`` that is not an http(s) URL (nor ``sim`` where ``sim`` is allowed).

    Raises:
        ConfigError: field ``--target``.
    """
    if not (sim and target == "sim") and not target.startswith(("http://", "https://")):
        hint = " (or 'sim')" if sim else ""
        raise ConfigError(f"{redact_url(target)!r} is not a URL: give http://HOST:PORT{hint}", field="--target")
    try:
        register_url(target)  # user:password@ and ?api_key=: in no output (redaction.redact_url's rules)
    except ValueError as exc:
        raise ConfigError(f"credentials in the target URL: {exc}", field="--target") from None


def read_api_key(args: KeySource) -> str | None:
    """The API key from ``--api-key-env`` or ``--api-key-file``; None when neither is given.

    Raises:
        ConfigError: the variable is unset, the file is unreadable, or the key holds a control
            character or is shorter than ``redaction.MIN_SECRET`` characters.
    """
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key or not key.strip():
            raise ConfigError(f"environment variable {args.api_key_env} is not set", field="--api-key-env")
        field = "--api-key-env"
    elif args.api_key_file:
        field = "--api-key-file"
        try:
            st = os.stat(args.api_key_file)
            if st.st_size > MAX_KEY_FILE_BYTES:
                raise ConfigError(f"API key file is {st.st_size} bytes (at most {MAX_KEY_FILE_BYTES})",
                                  path=args.api_key_file, field=field)
            key = Path(args.api_key_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read API key file: {exc}", field=field) from exc
    if key is None:
        return None
    try:
        key = check_secret(key, field=field)
    except ValueError as exc:
        raise ConfigError(str(exc), field=field) from None
    if not key:
        raise ConfigError("the API key is empty", field=field)
    try:
        register(key)  # refuses a key too short to redact (redaction.MIN_SECRET)
    except ValueError as exc:
        raise ConfigError(f"the API key: {exc}", field=field) from None
    return key


MAX_KEY_FILE_BYTES = 64 << 10
"""Largest API key file read (bytes)."""


def split_credentials(url: str, headers: dict[str, str]) -> tuple[str, str]:
    """Move ``user:password@`` out of a target URL into an ``Authorization: Basic`` header.

    The credentials are registered as secrets (never written); an API key, when
    given, wins over them. Returns ``(url without userinfo, label for outputs)``.

    Raises:
        ConfigError: the password (or, without one, the user name) is shorter than
            ``redaction.MIN_SECRET`` characters, or the URL has a query or fragment (its
            secrets registered all the same; field ``--target``; nothing sent).
    """
    try:
        register_url(url)  # first: no message below, nor any output, keeps a secret of it
    except ValueError as exc:
        raise ConfigError(f"credentials in the target URL: {exc}", field="--target") from None
    u = urlsplit(url)
    if u.query or u.fragment or url.endswith(("?", "#")):
        raise ConfigError(f"{redact_url(url)!r}: a target URL takes no query or fragment (requests go to "
                          "TARGET/v1/...); give an API key with --api-key-env or --api-key-file, "
                          "credentials as http://USER:PASSWORD@HOST:PORT", field="--target")
    if u.username is None and u.password is None:
        return url, url
    user, password = unquote(u.username or ""), unquote(u.password or "")
    try:
        # The password, or a lone user name (a token as user), must be long enough to redact.
        register(f"{user}:{password}", password or user, u.netloc.rpartition("@")[0])
        if "Authorization" not in headers:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            register_headers(headers)  # the encoded form too, before anything is sent or written
    except ValueError as exc:
        raise ConfigError(f"credentials in the target URL: {exc}", field="--target") from None
    bare = urlunsplit((u.scheme, u.netloc.rpartition("@")[2], u.path, u.query, u.fragment))
    return bare, redact_url(url)


def check_out_dir(out: Path, workload_path: Path) -> None:
    """Refuse an ``--out`` that is a file, not writable, or inside the workload folder.

    A run directory inside the workload folder would add its JSON files to the
    next load of that workload. The directory is created here.

    Raises:
        ConfigError: field ``--out``.
    """
    if out.exists() and not out.is_dir():
        raise ConfigError("--out names a file, not a folder", path=out, field="--out")
    if (out / RECORDS).is_symlink():
        raise ConfigError(f"{RECORDS} in the run directory is a symlink; choose a new --out", path=out,
                          field="--out")
    wl = workload_path.resolve()
    if wl.is_dir() and (out.resolve() == wl or wl in out.resolve().parents):
        raise ConfigError(f"--out is inside the workload folder {wl}; choose a folder outside it",
                          path=out, field="--out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the run directory: {exc.strerror or exc}", path=out, field="--out") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ConfigError("the run directory is not writable", path=out, field="--out")


def check_ca_file(ca_file: str | None) -> None:
    """Load ``--ca-file`` once before anything is made, so a bad one is exit 2, not a traceback mid-run.

    Raises:
        ConfigError: field ``--ca-file``: unreadable, or no PEM certificate in it.
    """
    if not ca_file:
        return
    import ssl

    from kvreplay.runner.h1 import client_ssl_context

    try:
        client_ssl_context(ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load it as PEM certificates: {exc.strerror or exc}", path=ca_file,
                          field="--ca-file") from None


def check_backend(name: str, profile: str | None) -> None:
    """Build the adapter ``--backend`` / ``--profile`` name, without a session, before the run directory is made.

    A typo (``--backend vlm``, ``--profile nosuch``, ``prometheus`` without a profile) was
    exit 2 only after ``plan.json``, an empty ``records.jsonl`` and a summary with no phase and
    ``aborted: null`` had been written, and that directory then refused the corrected
    command's ``--out``. ``auto`` is detected later; its ``--profile`` is loaded now. No request is sent.

    Raises:
        ConfigError: ``kvreplay.backends.make_backend``'s refusal (field ``--backend`` or ``--profile``).
    """
    if name == "none":
        return
    try:
        from kvreplay.backends import load_profile, make_backend
    except ImportError:  # no adapters installed: the run says so and reads no counters
        return
    try:
        if name == "auto":
            if profile is not None:
                load_profile(profile)
        else:
            make_backend(name, "http://127.0.0.1", None, profile=profile)
    except ConfigError as exc:
        if exc.field is None:
            raise ConfigError(exc.message, path=exc.path, line=exc.line, field="--profile") from None
        raise


def default_out() -> Path:
    """``runs/<UTC timestamp>``."""
    return Path("runs") / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


async def open_backend(name: str, url: str, profile: str | None, session: Any) -> Any:
    """The counter adapter ``name`` (``auto``: detected) for ``url`` on ``session``; None for ``none``.

    Module-level, so ``functools.partial(open_backend, name, url, profile)`` pickles and
    builds the adapter inside a ``--workers`` / ``--ray`` worker process.

    Raises:
        ConfigError: an unknown backend name or profile (``kvreplay.backends.make_backend``).
        BackendError: detection failed.
    """
    if name == "none":
        return None
    from kvreplay.backends import detect, make_backend

    chosen = await detect(url, session) if name == "auto" else name
    return make_backend(chosen, url, session, profile=profile)


def sim_run_extra(time_scale: float, calibration: dict[str, Any] | None) -> dict[str, Any]:
    """plan.json ``run`` keys of a ``--target sim`` run.

    ``sim_time_scale`` and, with ``--sim-from-verdict``, ``sim_calibration``
    (``sim.config.config_and_calibration``).
    """
    extra: dict[str, Any] = {"sim_time_scale": time_scale}
    if calibration is not None:
        extra["sim_calibration"] = calibration
    return extra


def make_observer(args: QuietOption) -> RunObserver:
    """The live display: none with --quiet, else plain lines (rich when available on a TTY)."""
    if args.quiet:
        return NullObserver()
    try:
        from kvreplay.report.progress import make_live_observer
    except ImportError:
        return PlainObserver()
    return make_live_observer(deadline_s=getattr(args, "stop_new_after", None))
