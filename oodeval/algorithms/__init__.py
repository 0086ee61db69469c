"""oodeval.algorithms."""
