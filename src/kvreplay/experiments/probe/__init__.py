"""The KV probe.

Legs (``legs``), probe prompts (``prompts``), entry sizing (``sizing``), the verdict's words
(``report``), a probe cut at ``stop_new_after`` (``cut``) and the probe as an experiment step
(``step``).
"""
