"""A/B repetitions.

Arms and alternating blocks (``arms``), matched-block comparison with bootstrap intervals
(``compare``, ``comparability``) and counter-ratio metrics (``ratios``).
"""
