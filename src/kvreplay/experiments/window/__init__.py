"""The diagnosis window: the experiment file, its frozen form and its execution.

Modules: ``spec`` (the parser), ``frozen`` (``experiment.json``) and ``execute`` (every
step inside one window, the restore always). What the step kinds share with the window
sits beside it in ``experiments``: ``model`` (the file's dataclasses), ``fields``
(durations, names, bounds) and ``lifecycle`` (incarnations, readiness, restore).
"""
