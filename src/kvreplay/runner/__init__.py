"""kvreplay.runner."""
