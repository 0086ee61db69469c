"""oodeval.report."""
