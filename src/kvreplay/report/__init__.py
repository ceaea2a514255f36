"""kvreplay.report."""
