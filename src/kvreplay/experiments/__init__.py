"""Experiments built on the runner: the KV probe, A/B repetitions and their comparison.

- ``kvreplay.experiments.probe``: cold/warm legs, prefill fit, eviction bisection.
- ``kvreplay.experiments.ab``: arms, alternating blocks frozen before the first request.
- ``kvreplay.experiments.compare``: paired ratios, bootstrap intervals, a verdict.
- ``kvreplay.experiments.stats``: least squares and the percentile bootstrap.
- ``kvreplay.experiments.prompts``: prompts sized in tokens on the target.
"""
