"""oodeval.shift."""
