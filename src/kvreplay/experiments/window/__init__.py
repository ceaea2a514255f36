"""The diagnosis window: the experiment file, its frozen form, server lifecycle and execution.

Modules: ``spec`` (the parser; its dataclasses in ``model``, field helpers in ``fields``),
``frozen`` (``experiment.json``), ``lifecycle`` (incarnations, readiness, restore) and
``execute`` (every step inside one window, the restore always).
"""
