"""Series a server exposes that the chosen backend does not read (issue 27, item 3).

A backend reads the series its profile maps (``backends.Profile``: each common name's
alternatives, the start marker, the identity info series). A server can expose more:
a host tier's lookups, hits and fetched tokens, the requests retiring, the transfers in
flight. Read through a backend whose profile lacks them, those counters are absent and
the drain does not wait for them, and nothing said so. ``unread_series`` compares a
``/metrics`` body with the chosen profile and with every built-in profile: the series
some built-in profile reads and the chosen one does not are *unread*; the profile that
reads most of them is named.
"""

from __future__ import annotations

from typing import Any

__all__ = ["fetch_metrics_text", "sim_metrics_text", "unread_series"]


def _exposed(text: str) -> set[str]:
    out = set()
    for ln in text.splitlines():
        ln = ln.strip()
        if ln and not ln.startswith("#"):
            out.add(ln.split("{", 1)[0].split(" ", 1)[0])
    return out


def _reads(profile: Any) -> dict[str, str]:
    """Series name -> the common name it gives (start and info series: ``started`` / ``identity``)."""
    out = {name: m.common for m in profile.maps for name, _labels in m.alternatives}
    out.update(dict.fromkeys(profile.started, "started"))
    out.update(dict.fromkeys(profile.info_series, "identity"))
    return out


def unread_series(text: str, backend: str, profile: str | None = None) -> dict[str, Any] | None:
    """What a ``/metrics`` body exposes that ``backend`` (with ``profile``) does not read; None when nothing.

    Args:
        text: The ``/metrics`` body.
        backend: The backend name (``vllm``, ``prometheus``, ...); ``auto`` and ``none`` give None.
        profile: The profile given with ``--backend prometheus`` (a name or a path).

    Returns:
        ``{"backend", "series": [unread names], "common": [the common names they give],
        "drain_gauges": [load gauges among them], "profile": the built-in profile that reads
        most of them, "message"}``.
    """
    from kvreplay.backends import builtin_profile_names, load_profile
    from kvreplay.errors import ConfigError

    try:
        chosen = load_profile(profile or backend)
    except (ConfigError, OSError, ValueError):
        return None
    exposed = _exposed(text)
    reads = _reads(chosen)
    have = set(reads.values())
    best_name, best_n = None, 0
    missing: dict[str, str] = {}
    for name in builtin_profile_names():
        if name == chosen.name:
            continue
        try:
            other = _reads(load_profile(name))
        except (ConfigError, OSError, ValueError):
            continue
        # exposed, read by that profile, giving a common name the chosen profile never gives
        extra = {s: c for s, c in other.items()
                 if s in exposed and s not in reads and c not in have and c not in ("started", "identity")}
        missing.update(extra)
        if len(extra) > best_n:
            best_name, best_n = name, len(extra)
    if not missing:
        return None
    commons = sorted(set(missing.values()))
    gauges = [c for c in commons if best_name and c in set(load_profile(best_name).load_gauges)]
    how = f"--backend prometheus --profile {best_name}" if best_name else "a profile that maps them"
    msg = (f"backend {backend} does not read {len(missing)} series the server exposes "
           f"({', '.join(commons) or ', '.join(sorted(missing))})"
           + (f"; the drain will not wait for {', '.join(gauges)}" if gauges else "")
           + f"; {how} reads them")
    return {"backend": backend, "series": sorted(missing), "common": commons, "drain_gauges": gauges,
            "profile": best_name, "message": msg}


def sim_metrics_text(sim: dict[str, Any]) -> str:
    """The embedded simulator's ``/metrics`` body for ``[server.sim]`` settings (nothing is started)."""
    from kvreplay.sim import SimConfig
    from kvreplay.sim.engine import SimEngine
    from kvreplay.sim.metrics import render_metrics

    return render_metrics(SimEngine(SimConfig(**{k: v for k, v in sim.items() if k != "faults"})))


def fetch_metrics_text(url: str, timeout_s: float = 2.0) -> str | None:
    """``GET url/metrics`` (None when the server does not answer within ``timeout_s``)."""
    import urllib.request

    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout_s) as r:  # noqa: S310 - the target
            return r.read(8 << 20).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
