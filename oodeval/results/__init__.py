"""oodeval.results."""
