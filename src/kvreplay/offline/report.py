"""Curve reports: hit ratios, prefill seconds saved and the recommended capacity.

The prefill cost model is the probe's least-squares fit ``prefill_s = a +
tokens / rate`` (DESIGN.md question 3). A cached token is a token not
prefilled, so the seconds saved at a capacity are ``hit_tokens / rate``; ``a``
is paid by every request whatever the cache does and only enters the cold
total ``requests * a + prompt_tokens / rate``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from kvreplay.errors import ConfigError

__all__ = ["PrefillModel", "curve_rows", "parse_prefill", "recommend"]

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class PrefillModel:
    """``prefill_s = a_s + tokens / rate_tokens_per_s``.

    Attributes:
        a_s: Fixed cost per request (s).
        rate_tokens_per_s: Prefill rate (tokens/s).
        r2: Fit quality where it came from a probe verdict, else None.
        source: ``"flag"`` or the verdict file's path.
    """

    a_s: float
    rate_tokens_per_s: float
    r2: float | None = None
    source: str = "flag"

    def to_json(self) -> dict:
        """JSON form."""
        return {
            "a_s": self.a_s,
            "rate_tokens_per_s": self.rate_tokens_per_s,
            "r2": self.r2,
            "source": self.source,
        }


def parse_prefill(text: str) -> PrefillModel:
    """Parse ``--prefill``: ``a=1.52,rate=1370`` or a probe ``verdict.json``.

    The verdict file holds ``{"prefill_fit": {"a_s": ..., "rate_tokens_per_s": ..., "r2": ...}}``
    and, from a probe of ``--target sim``, ``sim_time_scale`` s: the fit is then in scaled
    seconds and is returned as ``a / s``, ``rate x s``.

    Args:
        text: The flag value.

    Returns:
        The model.

    Raises:
        ConfigError: unknown keys, missing ``rate``, a non-positive or infinite rate,
            a negative ``a=`` (a verdict's fitted intercept is kept as fitted), or an
            unreadable verdict file.
    """
    if "=" in text:
        vals: dict[str, float] = {}
        for part in text.split(","):
            k, sep, v = part.partition("=")
            k = k.strip()
            if not sep or k not in ("a", "rate"):
                raise ConfigError(
                    f"expected a=SECONDS,rate=TOKENS_PER_S, got {text!r}", field="prefill"
                )
            try:
                vals[k] = float(v)
            except ValueError as exc:
                raise ConfigError(f"{k} is not a number: {v!r}", field="prefill") from exc
        if "rate" not in vals:
            raise ConfigError("rate= is required", field="prefill")
        if not 0 <= vals.get("a", 0.0) < math.inf:
            raise ConfigError("a must be a number of seconds >= 0", field="prefill")
        model = PrefillModel(vals.get("a", 0.0), vals["rate"])
    else:
        p = Path(text)
        try:
            doc = json.loads(p.read_text())
            fit = doc["prefill_fit"]
            # A probe of the simulator at time scale s measured s x (a + n / rate): undo it,
            # so the model is in the simulator's model seconds like a real server's.
            scale = float(doc.get("sim_time_scale", 1.0))
            if not scale > 0:
                raise ValueError("the probe ran the simulator at time scale 0: it measured no time")
            model = PrefillModel(
                float(fit["a_s"]) / scale,
                float(fit["rate_tokens_per_s"]) * scale,
                None if fit.get("r2") is None else float(fit["r2"]),
                str(p) if scale == 1.0 else f"{p} (simulator time scale {scale:g} undone)",
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"not a probe verdict with prefill_fit: {exc}", path=p, field="prefill_fit"
            ) from exc
    if not 0 < model.rate_tokens_per_s < math.inf:
        raise ConfigError("rate must be positive", field="prefill")
    return model


def curve_rows(
    points: list[tuple[int, int, int]],
    *,
    requests: int,
    prompt_tokens: int,
    prefill: PrefillModel | None,
    capacity_tokens: int | None,
    bytes_per_token: int,
) -> list[dict]:
    """Rows of the ``curve`` list.

    Args:
        points: ``(capacity, hit_requests, hit_tokens)`` ascending.
        requests: Requests counted.
        prompt_tokens: Their prompt tokens (tokens).
        prefill: The cost model, or None (``prefill_s_saved`` is then null).
        capacity_tokens: Tokens per capacity unit (blocks), or None (entries).
        bytes_per_token: KV bytes per token (bytes), for ``memory_gib``.

    Returns:
        One dict per point: ``capacity``, ``hit_ratio_requests``,
        ``hit_ratio_tokens``, ``prefill_s_saved``, ``hit_requests``,
        ``hit_tokens``, and for blocks ``capacity_tokens`` and ``memory_gib``.
    """
    rows = []
    for cap, hr, ht in points:
        row = {
            "capacity": cap,
            "hit_ratio_requests": hr / requests if requests else 0.0,
            "hit_ratio_tokens": ht / prompt_tokens if prompt_tokens else 0.0,
            "prefill_s_saved": None if prefill is None else ht / prefill.rate_tokens_per_s,
            "hit_requests": hr,
            "hit_tokens": ht,
        }
        if capacity_tokens is not None:
            row["capacity_tokens"] = cap * capacity_tokens
            row["memory_gib"] = cap * capacity_tokens * bytes_per_token / GIB
        rows.append(row)
    return rows


def recommend(rows: list[dict], *, share: float, metric: str) -> dict | None:
    """The smallest capacity whose hit ratio reaches ``share`` of the best in ``rows``.

    Args:
        rows: Curve rows, ascending capacity, the last one at the capacity past
            which nothing more hits (the best achievable).
        share: In (0, 1].
        metric: ``"tokens"`` or ``"requests"``.

    Returns:
        That row plus ``share``, ``metric`` and ``best_hit_ratio``; None for no rows.
    """
    if not rows:
        return None
    key = "hit_ratio_tokens" if metric == "tokens" else "hit_ratio_requests"
    best = max(r[key] for r in rows)
    for r in rows:
        if r[key] >= share * best - 1e-12:
            return {**r, "share": share, "metric": metric, "best_hit_ratio": best}
    return None  # pragma: no cover - the best row always qualifies
