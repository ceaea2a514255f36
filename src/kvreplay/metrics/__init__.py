"""kvreplay.metrics."""
