"""Typed run options: what ``kvreplay.replay`` takes as keywords, checked as the command line checks them.

``RunOptions`` (the keywords of ``kvreplay.replay`` / ``replay_async`` / ``demo`` beside
their explicit parameters) and ``SimOptions`` (their ``sim=`` dict) are ``TypedDict`` classes, so
a type checker reports a misspelt keyword or a value of the wrong type at the call;
``check_keywords`` repeats those checks at run time (``ConfigError`` naming the keyword) and
then the command line's own range check of the same option (``--read-timeout`` refuses
``-1``, so ``read_timeout=-1`` is refused too, with the same message).

Durations are float seconds here (``"60s"`` is the command line's and the TOML form).
Each key is the option's ``dest`` on the command line (``--read-timeout`` is
``read_timeout``; ``--sim-time-scale`` is ``sim={"time_scale": ...}``); the option-parity
test (tests/unit/test_option_parity.py) holds the two surfaces equal.

Layer: below ``sim`` and ``plan`` (they may read these declarations), above ``argtypes``
and ``errors``.
"""

from kvreplay.options.check import check_keywords, check_value
from kvreplay.options.run import RUN_KEYWORDS, SIM_KEYWORDS, RunConfig, RunOptions, SimOptions, TargetConfig

__all__ = ["RUN_KEYWORDS", "SIM_KEYWORDS", "RunConfig", "RunOptions", "SimOptions", "TargetConfig", "check_keywords",
           "check_value"]
