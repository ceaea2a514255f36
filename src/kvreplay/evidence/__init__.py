"""Restore evidence: the counter/tier vocabulary and the one engine that turns counters into findings."""
