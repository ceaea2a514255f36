"""Subcommands of the ``kvreplay`` CLI, one module each (discovered by ``cli.py``)."""
