"""oodeval.measures."""
