"""Experiments built on the runner, one subpackage per concept, with what they share beside them.

- ``kvreplay.experiments.probe``: the KV probe (cold/warm legs, prefill fit, eviction bisection, verdict).
- ``kvreplay.experiments.ab``: A/B arms in a frozen alternating order; matched-block comparison.
- ``kvreplay.experiments.window``: the diagnosis window (experiment file, freeze, lifecycle, execution).
- ``kvreplay.experiments.steps``: the step-kind registry, one module per ``kind`` of ``[[step]]``
  (incarnation, run, probe, ab, restore): how each is parsed, frozen, run and published.
- shared: ``findings`` (phase views, comparisons, the decision tree), ``publish`` (result.json and the
  reports), ``stats`` (least squares, the percentile bootstrap), ``timescale`` (simulator time).
"""
