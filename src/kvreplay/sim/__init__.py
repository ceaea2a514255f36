"""kvreplay.sim."""
