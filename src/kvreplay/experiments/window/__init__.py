"""The diagnosis window.

The experiment file (``spec``), its frozen form (``frozen``), server lifecycle (``lifecycle``)
and execution with the restore (``execute``).
"""
