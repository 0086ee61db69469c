"""oodeval.openworld."""
