"""kvreplay.backends."""
