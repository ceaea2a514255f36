"""``python -m kvreplay``."""

from kvreplay.cli import entry

entry()
