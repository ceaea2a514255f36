"""kvreplay.sweeps: load sweeps whose every point states, and proves, the cache state it ran on.

``kvreplay sweep`` (``kvreplay.api.sweeping``) runs each point as an ordinary run
directory; this package holds what a sweep adds above one run: its loads, SLOs and
limits (``loads``), each point's phases and sweep.json entry (``points``), goodput
(``goodput``), the cache state's proof (``cache``), the automatic search and the knee
(``knee``), sweep.json and points.csv (``document``) and report.html (``report``).

Layers (docs/architecture.md): below ``experiments``, above ``report`` and
``backends``; it reads run directories only through ``rundir``.
"""

from kvreplay.sweeps.cache import CACHE_STATES, cache_evidence
from kvreplay.sweeps.document import SWEEP_FORMAT, SWEEP_JSON, is_sweep_dir, read_sweep, write_sweep
from kvreplay.sweeps.goodput import Goodput, goodput
from kvreplay.sweeps.knee import KneeSearch, knee
from kvreplay.sweeps.loads import Loads, Slo, Until, arrival_spec, parse_loads, parse_slo, parse_until
from kvreplay.sweeps.points import PointSpec, point_entry, point_phases

__all__ = [
    "CACHE_STATES",
    "SWEEP_FORMAT",
    "SWEEP_JSON",
    "Goodput",
    "KneeSearch",
    "Loads",
    "PointSpec",
    "Slo",
    "Until",
    "arrival_spec",
    "cache_evidence",
    "goodput",
    "is_sweep_dir",
    "knee",
    "parse_loads",
    "parse_slo",
    "parse_until",
    "point_entry",
    "point_phases",
    "read_sweep",
    "write_sweep",
]
