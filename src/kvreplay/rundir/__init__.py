"""The run directory and the experiment directory: their files, written and read in one place."""
