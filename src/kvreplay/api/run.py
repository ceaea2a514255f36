r"""Replay a workload against a target in a frozen order: the behaviour of ``kvreplay run``.

``kvreplay.replay`` and ``kvreplay run`` both come here: the options are declared once
(``add_arguments``, the command line's and the API's defaults) and executed by
``run_async``; ``commands/run.py`` only prints. Examples::

    kvreplay run fixtures/workloads/mtbench-52 --target sim \
        --phase prime:forward:c1 --phase replay:reverse:c4 --out runs/x
    kvreplay run --from-plan runs/x/plan.json --target http://127.0.0.1:8000 --backend vllm
"""

from __future__ import annotations

import asyncio
import base64
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit, urlunsplit

from kvreplay.api.fleet import (
    add_fleet_arguments,
)
from kvreplay.argtypes import add_declared, bound, duration
from kvreplay.errors import ConfigError
from kvreplay.options import RunConfig
from kvreplay.redaction import check_secret, redact_url, register, register_headers
from kvreplay.report.units import sim_time_scale
from kvreplay.rundir import RECORDS, REPORT_MD, read_plan
from kvreplay.runner.observer import NullObserver, PlainObserver, RunObserver
from kvreplay.safe_io import echo


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

EXIT_ABORTED = 3
EXIT_CLIENT_ERROR = 1
"""Some positions failed inside the client (``client_error`` records); everything is written."""


def add_target_arguments(p: Any) -> None:
    """Options shared by commands that talk to a target (run, demo, probe...): ``RunConfig``'s ``target`` group."""
    from kvreplay.backends import backend_names

    add_declared(p, RunConfig, ("target",))
    for action in p._actions:  # the backends' names are known here, above kvreplay.options
        if action.dest == "backend":
            action.help = f"counter adapter: auto, none, {', '.join(backend_names())}"
    try:
        from kvreplay.sim import add_arguments as add_sim_arguments
    except ImportError:  # pragma: no cover - simulator not built
        return
    add_sim_arguments(p, prefix="sim-")


def add_arguments(p: Any) -> None:
    """Register ``run``'s options: ``kvreplay.options.RunConfig``'s fields (their one declaration), then the fleet's."""
    add_declared(p, RunConfig, ("run", "contract"))
    add_target_arguments(p)
    add_fleet_arguments(p)  # api.fleet


def add_contract_arguments(p: Any) -> None:
    """``--expect-identity``, ``--abort-on-malformed``, ``--on-check-fail`` (run, ab): the ``contract`` group."""
    add_declared(p, RunConfig, ("contract",))


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


parse_duration = duration
"""``90``, ``90s``, ``70m``, ``1.5h``, ``250ms`` -> seconds (``kvreplay.argtypes.duration``; its old name here)."""

parse_bound = bound
"""``host_bytes>34e9`` -> ``("host_bytes", ">", 34e9)`` (``kvreplay.argtypes.bound``; its old name here)."""


def check_target(target: str, *, sim: bool) -> None:
    """Refuse a ``--target`` that is not an http(s) URL (nor ``sim`` where ``sim`` is allowed).

    Raises:
        ConfigError: field ``--target``.
    """
    if not (sim and target == "sim") and not target.startswith(("http://", "https://")):
        hint = " (or 'sim')" if sim else ""
        raise ConfigError(f"{target!r} is not a URL: give http://HOST:PORT{hint}", field="--target")


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
            ``redaction.MIN_SECRET`` characters (field ``--target``; nothing sent).
    """
    u = urlsplit(url)
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


def install_loop() -> None:
    """Use uvloop where it is installed (the runner's default event loop)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def write_reports_for(args: object, summary: dict[str, Any], out: str) -> Path | None:
    """The reports at the end of a run, as ``--report`` asks; the path of report.html or None.

    ``none`` removes a report.md already in the folder; ``md`` writes report.md only;
    ``html`` writes both up to ``AUTO_HTML_MAX_RECORDS`` records (above it, none: the caller
    says how to draw it later).
    """
    mode = getattr(args, "report", "html")
    if mode == "none":
        # none means none, also over a report.md already in the folder.
        (Path(out) / REPORT_MD).unlink(missing_ok=True)
    elif mode == "md":
        write_html_report(out, html=False)
    elif summary.get("records", 0) <= AUTO_HTML_MAX_RECORDS:
        return write_html_report(out)
    return None


def time_scale_of(out: str) -> float | None:
    """The simulator time scale in ``out/plan.json`` (``report.units.sim_time_scale``), or None."""
    return sim_time_scale(read_plan(Path(out)))


AUTO_HTML_MAX_RECORDS = 2_000_000
"""Largest run whose report.html is drawn at the end of ``run`` by default (records).
The report streams records (``kvreplay.report.stream``; 200,000 records in about
2 s of CPU and under 150 MB, bench/bench_report.py), so only a very long run
leaves it to ``kvreplay report RUN_DIR --html``."""


def write_html_report(out: str | Path, *, html: bool = True) -> Path | None:
    """Write report.md and report.html into the run directory (after every run, interrupted ones too).

    With ``html=False`` only report.md is written (``--report md``).

    Returns:
        The path of report.html, or None when it could not be written (the run's
        data is already on disk; ``kvreplay report RUN_DIR --html`` retries).
    """
    try:
        from kvreplay.report.write import write_reports

        return write_reports(out, html=html).get("html")
    except Exception as exc:  # noqa: BLE001 - records/summary are written; a report bug must not lose the exit code
        echo(f"kvreplay: report.html not written ({type(exc).__name__}: {exc}); "
             f"retry with: kvreplay report {out} --html", err=True)
        return None
